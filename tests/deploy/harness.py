"""The deployment test's machinery: a private Docker engine on loopback, the stand-in bases, the
project's images built from their own Dockerfiles, and the compose override for host networking.

The machine's rules (issue 37): the engine runs as ``dockerd --bridge=none --iptables=false`` with
its own data root, socket and pid file, so everything it holds belongs to the test; builds use
``--network host`` and ``--pull=false``; every service runs with ``network_mode: host`` and is
reached on 127.0.0.1 at ports the test chose; nothing is pulled (``pull_policy: never``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tidemark.liveness import pid_alive

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
STANDIN = "tidemark-standin"
IMAGES = {"airflow": "tidemark-airflow:deploy-test", "spark": "tidemark-spark:deploy-test"}
BASES = {  # the build argument of each project image -> its stand-in
    "airflow": {"MAVEN_IMAGE": f"{STANDIN}/maven:3-jdk17", "AIRFLOW_IMAGE": f"{STANDIN}/airflow:3.3.2"},
    "spark": {"PYTHON_IMAGE": f"{STANDIN}/python:3.11"},
}
OFFICIAL = {  # the compose file's pulled images -> their stand-ins
    "postgres:15": f"{STANDIN}/postgres:15",
    "apache/kafka:3.9.1": f"{STANDIN}/kafka:3.9.1",
}


def log(message: str) -> None:
    print(f"deploy: {message}", flush=True)


def have_dockerd() -> bool:
    return shutil.which("dockerd") is not None or os.path.exists("/usr/sbin/dockerd")


@dataclass
class Engine:
    """A dockerd of the test's own (data root, exec root, socket and pid file under ``root``)."""

    root: Path
    proc: subprocess.Popen | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    def client_env(self) -> dict[str, str]:
        """The environment a ``docker`` client of this engine runs with."""
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0"}

    def start(self, timeout: float = 60) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        self.proc = subprocess.Popen(
            [
                dockerd,
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "dockerd.pid"),
                "-H",
                f"unix://{self.socket}",
            ],
            stdout=open(self.root / "dockerd.log", "ab"),  # noqa: SIM115 - the daemon's, for its life
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.env = self.client_env()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"dockerd exited ({self.proc.returncode}); see {self.root / 'dockerd.log'}"
                )
            if self.docker("info", check=False, quiet=True).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"dockerd did not answer on {self.socket} within {timeout:.0f} s")

    def docker(self, *args: str, check: bool = True, quiet: bool = False, timeout: float = 3600, **kw):
        done = subprocess.run(
            ["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout, **kw
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-3000:]}")
        return done

    def stop(self) -> None:
        """Stop the engine (its containers stop with it: they are its children) by its own pid."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.unmount()

    def unmount(self) -> None:
        """Detach what the engine left mounted under its root (its network namespace file stays a
        bind mount after dockerd exits), deepest first, so the directory can be removed."""
        root = str(self.root.resolve())
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            points = [line.split()[4] for line in info]
        for point in sorted((p for p in points if p == root or p.startswith(root + "/")), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def build_context(image: str, dest: Path) -> Path:
    """The context Docker sends for ``docker/<image>.Dockerfile``: the tracked files its
    ``.dockerignore`` lets through (last matching pattern wins). The legacy builder (no buildx
    here) reads only a context-root .dockerignore, so the test applies the per-Dockerfile file."""
    from helpers import filtered_context

    if dest.exists():
        shutil.rmtree(dest)
    filtered_context(DOCKER / f"{image}.Dockerfile.dockerignore", dest)
    (dest / "docker").mkdir(parents=True, exist_ok=True)
    shutil.copy2(DOCKER / f"{image}.Dockerfile", dest / "docker" / f"{image}.Dockerfile")
    return dest


IMAGE_STANDINS = ("python", "airflow", "maven")  # the bases of the project's two images
COMPOSE_STANDINS = ("kafka", "postgres")  # what the compose file pulls besides them


def build_standins(engine: Engine, names: tuple[str, ...] = IMAGE_STANDINS) -> float:
    """Build the stand-ins ``names`` (docker/standins/build.sh; the Debian root first, once) and tag
    those that stand for an official image the compose file names; seconds."""
    started = time.monotonic()
    done = subprocess.run(
        [str(DOCKER / "standins" / "build.sh"), STANDIN],
        env={**engine.env, "TIDEMARK_STANDINS": " ".join(names)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"stand-ins: {done.stderr.strip()[-3000:]}")
    for official, standin in OFFICIAL.items():
        if standin.split("/", 1)[1].split(":")[0] in names:
            engine.docker("tag", standin, official)
    return time.monotonic() - started


def build_image(engine: Engine, image: str, work: Path) -> float:
    """Build docker/<image>.Dockerfile with only its bases swapped (build arguments); seconds."""
    context = build_context(image, work / f"context-{image}")
    args = [a for k, v in BASES[image].items() for a in ("--build-arg", f"{k}={v}")]
    started = time.monotonic()
    engine.docker(
        "build",
        "--pull=false",
        "--network",
        "host",
        *args,
        "-f",
        str(context / "docker" / f"{image}.Dockerfile"),
        "-t",
        IMAGES[image],
        str(context),
    )
    return time.monotonic() - started


def run_image(engine: Engine, image: str, script: str, *options: str) -> str:
    """``bash -c script`` in a container of one of the project's images on the host's network
    (``--rm`` unless ``options`` name it, e.g. ``-d --name producer``); its standard output."""
    rm = () if "--name" in options else ("--rm",)
    return engine.docker(
        "run", *rm, *options, "--network", "host", "--pull=never", IMAGES[image], "bash", "-c", script
    ).stdout


def image_size_mb(engine: Engine, tag: str) -> float:
    out = engine.docker("image", "inspect", tag, "--format", "{{.Size}}").stdout
    return int(out.strip()) / 1e6


def inspect(engine: Engine, container: str) -> dict:
    return json.loads(engine.docker("inspect", container).stdout)[0]


def dump_yaml(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class Ports:
    postgres: int
    kafka: int
    kafka_controller: int
    spark_master: int
    spark_master_ui: int
    spark_worker_ui: int
    api: int
    scheduler_health: int

    @classmethod
    def free(cls) -> Ports:
        from helpers import listen_ports

        return cls(*listen_ports(8))


AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
# What the test runs: one Spark worker (the machine has 2 cores)
SERVICES = ("postgres", "kafka", "kafka-init", "spark-master", "spark-worker-1", *AIRFLOW_SERVICES)


def project_dir(work: Path, env: dict[str, str], pipelines: dict[str, dict]) -> Path:
    """A compose project laid out as the repository is (``docker/`` with ``dags`` and ``plugins``
    beside it, linked to the checkout's), with the test's ``docker/.env`` and pipelines, so the
    checkout's own docker/.env is never touched."""
    root = work / "project"
    if root.exists():
        shutil.rmtree(root)
    (root / "docker").mkdir(parents=True)
    for name in ("docker-compose.yml",):
        shutil.copy2(DOCKER / name, root / "docker" / name)
    for name in ("dags", "plugins"):
        (root / name).symlink_to(REPO / name)
    lines = [f"{k}={v}" for k, v in env.items()]
    (root / "docker" / ".env").write_text("\n".join(lines) + "\n")
    os.chmod(root / "docker" / ".env", 0o600)
    (root / "docker" / "pipelines").mkdir()
    for name, config in pipelines.items():
        dump_yaml(config, root / "docker" / "pipelines" / f"{name}.yaml")
    return root


def _probe(port: int) -> str:
    return f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/json/', timeout=5)"


def host_override(ports: Ports, volume_dir: Path, postgres_password: str) -> dict:
    """The test's compose override: every service on the host's network at the test's ports on
    127.0.0.1, nothing pulled, and the shared volume bound to a directory the test can read."""
    p = ports
    airflow_env = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
            f"postgresql+psycopg2://airflow:{postgres_password}@127.0.0.1:{p.postgres}/airflow"
        ),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{p.api}/execution/",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(p.scheduler_health),
        "AIRFLOW_CONN_TIDEMARK_SPARK": (
            f"spark://127.0.0.1:{p.spark_master}?deploy-mode=client&spark-binary=spark-submit"
        ),
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    host = {"network_mode": "host", "pull_policy": "never"}
    services: dict[str, dict] = {name: dict(host) for name in SERVICES}
    for name in AIRFLOW_SERVICES:
        services[name]["environment"] = dict(airflow_env)
    services["airflow-apiserver"]["command"] = ["api-server", "--port", str(p.api)]
    services["airflow-apiserver"]["healthcheck"] = {
        "test": ["CMD", "curl", "--fail", f"http://127.0.0.1:{p.api}/api/v2/version"],
        "interval": "10s",
    }
    services["airflow-scheduler"]["healthcheck"] = {
        "test": ["CMD", "curl", "--fail", f"http://127.0.0.1:{p.scheduler_health}/health"],
        "interval": "10s",
    }
    services["postgres"]["environment"] = {"PGPORT": str(p.postgres)}
    services["postgres"]["healthcheck"] = {
        "test": ["CMD", "pg_isready", "-h", "127.0.0.1", "-U", "airflow", "-d", "airflow"],
        "interval": "3s",
    }
    services["kafka"]["environment"] = {
        "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{p.kafka},CONTROLLER://127.0.0.1:{p.kafka_controller}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{p.kafka}",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{p.kafka_controller}",
    }
    services["kafka"]["healthcheck"] = {
        "test": [
            "CMD-SHELL",
            f"/opt/kafka/bin/kafka-broker-api-versions.sh --bootstrap-server 127.0.0.1:{p.kafka} >/dev/null",
        ],
        "interval": "5s",
    }
    services["kafka-init"]["command"] = [
        "/opt/kafka/bin/kafka-topics.sh",
        "--bootstrap-server",
        f"127.0.0.1:{p.kafka}",
        "--create",
        "--if-not-exists",
        "--topic",
        "orders",
        "--partitions",
        "4",
        "--replication-factor",
        "1",
    ]
    services["spark-master"]["command"] = [
        "spark-class",
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(p.spark_master),
        "--webui-port",
        str(p.spark_master_ui),
    ]
    services["spark-master"]["healthcheck"] = {
        "test": [
            "CMD",
            "python3",
            "-c",
            _probe(p.spark_master_ui),
        ],
        "interval": "5s",
    }
    services["spark-worker-1"]["command"] = [
        "spark-class",
        "org.apache.spark.deploy.worker.Worker",
        "--host",
        "127.0.0.1",
        "--webui-port",
        str(p.spark_worker_ui),
        "--cores",
        "2",
        "--memory",
        "2g",
        "--work-dir",
        "/opt/spark-work",
        f"spark://127.0.0.1:{p.spark_master}",
    ]
    services["spark-worker-1"]["healthcheck"] = {
        "test": [
            "CMD",
            "python3",
            "-c",
            _probe(p.spark_worker_ui),
        ],
        "interval": "5s",
    }
    for name in SERVICES:  # the names resolve on the host's network too (no compose DNS there)
        services[name]["extra_hosts"] = [f"{n}:127.0.0.1" for n in (*SERVICES, "spark-worker-2")]
    for name in ("spark-master", "spark-worker-1"):
        services[name]["environment"] = {"SPARK_LOCAL_IP": "127.0.0.1"}
    volumes = {
        "tidemark-var": {
            "driver": "local",
            "driver_opts": {"type": "none", "o": "bind", "device": str(volume_dir)},
        }
    }
    # no network of compose's own: its default would be a new bridge with a 172.x address
    networks = {"default": {"name": "host", "external": True}}
    return {"services": services, "volumes": volumes, "networks": networks}


COMPOSE_PROJECT = "tidemark-deploy-test"
COMPOSE_ENV = {"TIDEMARK_IMAGE_TAG": "deploy-test", "COMPOSE_PROJECT_NAME": COMPOSE_PROJECT}


def compose_command(project: Path, override: Path) -> list[str]:
    compose = shutil.which("docker-compose") or "/usr/bin/docker-compose"
    return [compose, "-f", str(project / "docker" / "docker-compose.yml"), "-f", str(override)]


def secrets_env() -> dict[str, str]:
    """docker/.env as a deployer fills it: strong secrets (deploy_secrets refuses placeholders)."""
    import secrets

    from cryptography.fernet import Fernet

    token = secrets.token_urlsafe
    return {
        "POSTGRES_PASSWORD": token(32),
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": token(32),
        "AIRFLOW__API__SECRET_KEY": token(32),
        # alerts go to loopback ports nobody listens on: a failing run's alert fails, visibly
        "AIRFLOW_CONN_TIDEMARK_SMTP": f"smtp://alerts:{token(32)}@127.0.0.1:9?from_email=alerts%40example.com",
        "AIRFLOW_CONN_TIDEMARK_WEBHOOK": json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "schema": "http", "port": 9, "password": token(32)}
        ),
    }


def orders_pipeline(ports: Ports, reconcile_start_ms: int | None = None) -> dict:
    """docker/pipelines/orders-kafka.yaml with the test's broker port (host network), a small
    cluster's executor share (the stream and a batch job each get one of the worker's 2 cores)."""
    config = yaml.safe_load((DOCKER / "pipelines" / "orders-kafka.yaml").read_text())
    config["source"]["bootstrap_servers"] = f"127.0.0.1:{ports.kafka}"
    config.setdefault("spark", {}).setdefault("conf", {}).update(
        {"spark.cores.max": 1, "spark.executor.memory": "768m", "spark.driver.memory": "1g"}
    )
    if reconcile_start_ms is not None:
        config.setdefault("airflow", {})["reconcile_start"] = reconcile_start_ms
    # the hour's final pass waits for end + allowed_lateness: 2 minutes here, not the default hour
    window = config.get("window") or "1m"
    window = dict(window) if isinstance(window, dict) else {"size": window}
    config["window"] = {**window, "allowed_lateness": "2m"}
    return config


def merged_compose(engine: Engine, project: Path, override: Path, out: Path) -> Path:
    """docker/docker-compose.yml with the test's override, merged by compose itself (``config``),
    less the published ports: Docker refuses them beside ``network_mode: host`` (where they mean
    nothing) and compose v1 cannot remove a key in an override (v2 would, with ``!reset``)."""
    done = subprocess.run(
        [*compose_command(project, override), "config"],
        env={**engine.env, **COMPOSE_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker-compose config: {done.stderr.strip()}")
    config = yaml.safe_load(done.stdout)
    for service in config["services"].values():
        if service.get("network_mode") == "host":
            service.pop("ports", None)
    return dump_yaml(config, out)


def build_project_images(engine: Engine, work: Path) -> dict:
    """Stand-ins, then both project images built cold, then again (warm: every layer cached).
    The timings and sizes, also written to var/deploy/images.json."""
    report: dict = {"standins_s": round(build_standins(engine), 1)}
    for image in ("spark", "airflow"):
        report[f"{image}_cold_s"] = round(build_image(engine, image, work), 1)
    for image in ("spark", "airflow"):
        report[f"{image}_warm_s"] = round(build_image(engine, image, work), 1)
        report[f"{image}_mb"] = round(image_size_mb(engine, IMAGES[image]), 1)
    report["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = REPO / "var" / "deploy"
    out.mkdir(parents=True, exist_ok=True)
    (out / "images.json").write_text(json.dumps(report, indent=2))
    log(f"images: {report}")
    return report


# -- the images built beside the run -------------------------------------------------------------
# The builds wait on the network (Debian and PyPI) much of the time: `pytest` starts them in the
# background as soon as it has collected an image test (tests/conftest.py), and the fixtures attach
# to that engine instead of building while a worker waits. Their CPU (apt, pip) still competes with
# the workers'. PREBUILD is the directory under
# the run's base temporary directory (a worker's parent): engine/, report.json or error.txt,
# pid, log, and stop (written when the run ends).
PREBUILD = "deploy-prebuild"
# nice 5 and best-effort I/O priority 7 (ionice is util-linux's; without it, nice alone)
PREBUILD_PRIORITY = ("nice", "-n", "5", *(("ionice", "-c", "2", "-n", "7") if shutil.which("ionice") else ()))


def prebuild_dir(basetemp: Path) -> Path | None:
    """The background build of this run, seen from a process whose base temporary directory is
    ``basetemp`` (the run's own, or an xdist worker's under it); None when there is none."""
    for base in (basetemp, basetemp.parent):
        if (base / PREBUILD / "pid").is_file():
            return base / PREBUILD
    return None


def start_prebuild(basetemp: Path) -> subprocess.Popen:
    """Start tests/deploy/prebuild.py in the background under ``basetemp``/PREBUILD."""
    import sys

    folder = basetemp / PREBUILD
    folder.mkdir(parents=True, exist_ok=True)
    # At a lower priority than the test workers (PREBUILD_PRIORITY, inherited by the engine and
    # the builds' containers): the workers' tests come first when both want the CPU.
    proc = subprocess.Popen(
        [
            *PREBUILD_PRIORITY,
            sys.executable,
            str(Path(__file__).with_name("prebuild.py")),
            str(folder),
            str(os.getpid()),
        ],
        stdout=open(folder / "log", "ab"),  # noqa: SIM115 - the builder's, for its life
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    (folder / "pid").write_text(str(proc.pid))
    return proc


def stop_prebuild(proc: subprocess.Popen, folder: Path, timeout: float = 180) -> None:
    """Ask the builder to stop its engine and remove it; kill it if it does not in ``timeout``."""
    (folder / "stop").touch()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        Engine(folder / "engine").unmount()


def attach_prebuild(folder: Path) -> Engine:
    """The background build's engine (the builder owns it: stopping this one does nothing)."""
    engine = Engine(folder / "engine")
    engine.env = engine.client_env()
    return engine


def wait_prebuild(folder: Path, timeout: float = 3600) -> dict:
    """The background build's report, once it is written; its error if it failed or died."""
    pid = int((folder / "pid").read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (folder / "report.json").is_file():
            return json.loads((folder / "report.json").read_text())
        if (folder / "error.txt").is_file():
            raise RuntimeError(f"the image build beside the run failed: {(folder / 'error.txt').read_text()}")
        if not pid_alive(pid):
            if (folder / "report.json").is_file():
                continue
            log_tail = (folder / "log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the image build beside the run died; its log ends:\n{log_tail}") from None
        time.sleep(2)
    raise RuntimeError(f"the image build beside the run did not finish in {timeout:.0f} s: {folder / 'log'}")
