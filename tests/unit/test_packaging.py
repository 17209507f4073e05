"""archive, packaging and sparkenv.ships_code: what reaches a cluster's executors, without a JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tidemark import archive, packaging
from tidemark.resources import entrypoint
from tidemark.sparkenv import ships_code


@pytest.mark.parametrize(
    ("master", "py_files", "ships"),
    [
        ("local[2]", "", False),
        ("local[*]", "", False),
        ("spark://127.0.0.1:7077", "", True),  # plain python, or a launcher that shipped nothing
        ("spark://127.0.0.1:7077", "file:/tmp/other-1.0.zip", True),
        ("spark://127.0.0.1:7077", "file:/opt/dist/tidemark-0.1.0-0123456789ab.zip", False),
        ("spark://h:7077", "/a/deps.zip,/opt/dist/tidemark-0.1.0-py3-none-any.whl", False),
        ("yarn", "", True),
    ],
)
def test_session_ships_the_archive_only_to_a_cluster_that_did_not_get_one(master, py_files, ships):
    assert ships_code(master, py_files) is ships


def test_code_archive_holds_every_module_and_is_named_by_its_content(tmp_path):
    first = archive.code_archive(tmp_path / "a")
    second = archive.code_archive(tmp_path / "b")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()  # reproducible
    assert first.name.startswith("tidemark-") and first.suffix == ".zip"
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
    sources = {
        f"tidemark/{p.relative_to(archive.PACKAGE_DIR).as_posix()}" for p in archive.PACKAGE_DIR.rglob("*.py")
    }
    assert sources <= names and {n for n in names if n.endswith(".py")} == sources - {
        n for n in sources if "__pycache__" in n
    }
    assert "tidemark/stream.py" in names and "tidemark/templates/report.html.j2" in names
    assert not any(n.endswith(".pyc") for n in names)


def test_a_driver_importing_tidemark_from_the_archive_renders_the_report(tmp_path):
    """spark-submit puts --py-files first on the driver's path too: the report's templates must
    load from the zip (zipimport), not only from an installed package."""
    shipped = archive.code_archive(tmp_path)
    probe = (
        "import tidemark, tidemark.charts as c; env = c.environment();"
        "print(tidemark.__file__);"
        "print(len([env.get_template(n) for n in env.list_templates()]))"
    )
    env = {**os.environ, "PYTHONPATH": str(shipped)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    ).stdout.split("\n")
    assert out[0].startswith(str(shipped)), out
    assert int(out[1]) == len(list((archive.PACKAGE_DIR / "templates").glob("*.j2"))) >= 5


def test_spark_submit_command_ships_the_archive_and_the_cached_jars(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_JVM_OPTIONS", " -XX:TieredStopAtLevel=1 ")
    monkeypatch.setenv("TIDEMARK_JVM_ARCHIVE", "off")  # the class archive: its own test below
    shipped = archive.code_archive(tmp_path)
    command = packaging.spark_submit_command(
        "stream_job.py",
        ["--config", "c.yaml"],
        master="spark://127.0.0.1:7077",
        archive=shipped,
        conf={"spark.executor.memory": "1g"},
    )
    assert Path(command[0]).name == "spark-submit"
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert command[command.index("--deploy-mode") + 1] == "client"
    assert command[command.index("--py-files") + 1] == str(shipped)
    jars = command[command.index("--jars") + 1].split(",")
    assert any(Path(j).name.startswith("delta-spark_") for j in jars)
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    # The driver JVM starts here, so spark-submit must pass its options (huge methods compiled,
    # then $TIDEMARK_JVM_OPTIONS).
    extra = " -XX:TieredStopAtLevel=1"
    assert confs == [
        f"spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods{extra}",
        f"spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods{extra}",
        f"spark.driver.extraClassPath={os.pathsep.join(jars)}",
        "spark.executor.memory=1g",
    ]
    assert any(Path(j).name == "tidemark-udf.jar" for j in jars)
    assert command[-3:] == [str(entrypoint("stream_job")), "--config", "c.yaml"]


def test_jvm_options_are_the_huge_methods_flag_unless_the_environment_adds_some(monkeypatch):
    from tidemark.sparkenv import jvm_conf

    monkeypatch.delenv("TIDEMARK_JVM_OPTIONS", raising=False)
    monkeypatch.setenv("TIDEMARK_JVM_ARCHIVE", "off")
    assert set(jvm_conf().values()) == {"-XX:-DontCompileHugeMethods"}
    monkeypatch.setenv("TIDEMARK_JVM_OPTIONS", "  ")
    assert set(jvm_conf().values()) == {"-XX:-DontCompileHugeMethods"}


def test_the_driver_maps_the_class_archive_made_for_its_jvm_and_class_path(tmp_path, monkeypatch):
    from tidemark import jvmarchive
    from tidemark.sparkenv import jvm_conf

    monkeypatch.delenv("TIDEMARK_JVM_OPTIONS", raising=False)
    monkeypatch.delenv("TIDEMARK_JVM_ARCHIVE", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("TIDEMARK_JARS_DIR", str(tmp_path))
    path = jvmarchive.archive_path()
    assert path is not None and path.parent == tmp_path / "jvm"
    assert jvm_conf()["spark.driver.extraJavaOptions"] == "-XX:-DontCompileHugeMethods"  # none yet
    path.parent.mkdir()
    path.write_bytes(b"archive")
    conf = jvm_conf()
    assert conf["spark.driver.extraJavaOptions"] == (
        f"-XX:-DontCompileHugeMethods -XX:SharedArchiveFile={path} {jvmarchive.QUIET}"
    )
    assert conf["spark.executor.extraJavaOptions"] == "-XX:-DontCompileHugeMethods"  # workers: not theirs
    # Another class path in front of Spark's jars, or another JVM: another archive, not this one.
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert jvmarchive.archive_path() != path
    monkeypatch.delenv("SPARK_CONF_DIR")
    # another cached jar (they lead the driver's class path): another archive
    (tmp_path / "delta-spark_4.1_2.13-9.9.9.jar").write_bytes(b"jar")
    assert jvmarchive.archive_path() != path
    (tmp_path / "delta-spark_4.1_2.13-9.9.9.jar").unlink()
    assert jvmarchive.archive_path() == path
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    (fake_home / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    assert jvmarchive.archive_path() not in (None, path)
    monkeypatch.setenv("TIDEMARK_JVM_ARCHIVE", "off")
    assert jvmarchive.archive_path() is None and jvmarchive.driver_options() == ""


def test_jars_go_on_the_drivers_class_path_and_travel_only_to_a_clusters_executors():
    from tidemark.sparkenv import jar_conf

    jars = ["/c/delta.jar", "/c/kafka.jar"]
    on_path = os.pathsep.join(jars)
    for master in ("local", "local[2]", "local[*]"):
        assert jar_conf(master, jars) == {"spark.driver.extraClassPath": on_path}
    shipped = {"spark.driver.extraClassPath": on_path, "spark.jars": "/c/delta.jar,/c/kafka.jar"}
    for master in ("spark://h:7077", "local-cluster[2,1,1024]", "yarn"):
        assert jar_conf(master, jars) == shipped
    # a second session in a process whose JVM is up: its class path is fixed, spark.jars adds them
    assert jar_conf("local[2]", jars, jvm_running=True) == shipped
    # the user's own driver class path stays, behind the cached jars
    given = jar_conf("local[2]", jars, {"spark.driver.extraClassPath": "/mine.jar"})
    assert given == {"spark.driver.extraClassPath": f"{on_path}{os.pathsep}/mine.jar"}


def test_submit_refuses_an_unknown_job_with_one_line(capsys):
    assert packaging.main(["submit", "no_such_job.py", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("tidemark: error: spark job no_such_job.py: no such file")


def test_executors_on_a_cluster_get_the_python_their_configuration_names():
    import sys

    cluster = packaging.submit_env({"PATH": "/usr/bin"}, master="spark://10.0.0.5:7077")
    assert "PYSPARK_PYTHON" not in cluster  # spark.pyspark.python or the workers' own decide
    assert cluster["PYSPARK_DRIVER_PYTHON"] == sys.executable
    local = packaging.submit_env({"PATH": "/usr/bin"}, master="local[2]")
    assert local["PYSPARK_PYTHON"] == sys.executable


def test_shipped_jobs_are_found_in_the_package_not_the_checkout():
    import tidemark

    package = Path(tidemark.__file__).resolve().parent
    for job in ("stream_job", "reconcile_job", "quality_job", "maintain_job"):
        assert entrypoint(job).resolve().parent == package / "jobs"
    with pytest.raises(ValueError, match="unknown spark job"):
        entrypoint("no_such_job")


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pom", sorted((REPO / "scripts").glob("*/pom.xml")), ids=lambda p: p.parent.name)
def test_every_pom_setup_fetches_from_is_well_formed_xml(pom):
    """A POM Maven cannot parse fails `make setup` on a fresh machine only (the jar cache hides it
    here): a comment holding "--" did exactly that once. Each POM must parse and be one setup uses."""
    import xml.etree.ElementTree as ET

    root = ET.parse(pom).getroot()  # raises on what Maven's parser also refuses
    assert (
        root.tag.endswith("project")
        and root.find("{http://maven.apache.org/POM/4.0.0}dependencies") is not None
    )
    assert str(pom.relative_to(REPO)) in (REPO / "scripts/setup.sh").read_text()
