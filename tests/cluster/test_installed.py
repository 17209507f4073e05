"""The package as a deployer gets it: a wheel in a fresh virtualenv, run from a directory that is
not a checkout. It carries its spark-submit jobs, GX suites, Java source, Airflow side and DAG
files (tidemark.resources); nothing may come from this repository at run time.

From there: ``tidemark demo`` (small), ``tidemark reconcile`` through spark-submit on the
standalone cluster with the executors' Python set by ``spark.pyspark.python``, and the
reconciliation DAG with ``airflow dags test`` from a DAGs folder holding only the DAG files. The
only thing shared with the checkout is the machine's JVM jar cache (``TIDEMARK_JARS_DIR``), which
set-up fills from Maven Central and which no wheel carries.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import suite_jvm_options
from lockfile import read_lock

from tidemark.resources import jars_dir
from tidemark.timeutil import format_instant_ms, parse_instant_ms

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START, END = "2025-11-22T10:00:00Z", "2025-11-22T10:02:00Z"  # the demo scenario's first two windows


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, a work directory outside the checkout, seconds to build and install)."""
    root = tmp_path_factory.mktemp("installed")
    began = time.monotonic()
    dist = root / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
        cwd=root,
    )
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools' in-tree build directory
    [wheel] = dist.glob("tidemark-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The wheel's own dependency declarations are resolved (not --no-deps), every version held to
    # the lock's pin: requirements.lock's pins as constraints (a constraints file takes no
    # hashes). uv, offline, from the cache set-up filled (scripts/setup.sh): seconds instead of
    # pip's minutes of unpacking some 2 GB; the wheel and what it declares are the same. The
    # lock's pins bind the isolated builds too (pyspark's sdist builds with the locked setuptools,
    # whose wheel set-up put in uv's cache).
    constraints = root / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, (version, _) in read_lock().items()))
    python = str(venv / "bin" / "python")
    uv = str(Path(sys.executable).with_name("uv"))
    install = [uv, "pip", "install", "-q", "--offline", "--python", python]
    subprocess.run(
        [*install, f"{wheel}[airflow]", "-c", str(constraints), "--build-constraints", str(constraints)],
        check=True,
        cwd=root,
    )
    subprocess.run([python, "-m", "pip", "check"], check=True, cwd=root)
    work = root / "work"
    work.mkdir()
    yield python, work, round(time.monotonic() - began, 1)
    shutil.rmtree(venv, ignore_errors=True)  # ~2 GB of links into uv's cache (copies across file systems)


def _env(work: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK", "PYSPARK"))}
    env.pop("PYTHONPATH", None)
    return {
        **env,
        **suite_jvm_options(),
        "TIDEMARK_JARS_DIR": str(jars_dir()),
        "HOME": str(work),
        "SPARK_LOCAL_IP": "127.0.0.1",
        **extra,
    }


def _run(args: list[str], work: Path, timeout: float = 900, **env: str) -> str:
    done = subprocess.run(
        args, cwd=work, env=_env(work, **env), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(args[:4])} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def _reconciled(python: str, work: Path, config: Path) -> dict[str, list]:
    # The probe ends as the tidemark command does (tidemark.cli.exit_now): delta-rs's and Arrow's
    # native thread pools can abort the interpreter's own teardown after the work is done (exit
    # -6, "terminate called without an active exception"; seen once here, after the probe had
    # printed the right rows).
    code = (
        "import json,sys; from tidemark.config import load_config;"
        "from tidemark import tables as T, schemas as S; from tidemark.cli import exit_now;"
        "f=T.read_local(load_config(sys.argv[1]).table_path(S.RECONCILIATION));"
        "f=f.assign(ms=T.epoch_ms(f['window_start'])).sort_values('ms');"
        "print(json.dumps({'ms': f['ms'].astype(int).tolist(),"
        "'batch': f['batch_events'].astype(int).tolist()})); exit_now(0)"
    )
    return json.loads(_run([python, "-c", code, str(config)], work).strip().splitlines()[-1])


def test_the_wheel_runs_the_demo_a_cluster_reconcile_and_the_dag_outside_the_checkout(installed, cluster):
    python, work, install_s = installed
    bin_dir = Path(python).parent
    timings = {"build_and_install_s": install_s}

    # Everything comes from the virtualenv: code, jobs, suites, Java source, Airflow side, DAG files,
    # and the report's Jinja2 templates (as the report loads them).
    where = _run(
        [
            python,
            "-c",
            "import json, tidemark, tidemark_airflow; from tidemark import resources as r;"
            "from importlib.resources import files; from tidemark.charts import environment;"
            "print(json.dumps([tidemark.__file__, tidemark_airflow.__file__,"
            "str(r.entrypoint('reconcile_job')), str(r.suites_dir()), *map(str, r.java_sources()),"
            "environment().get_template('report.html.j2').filename, str(files('tidemark_airflow.dags'))]))",
        ],
        work,
    )
    paths = json.loads(where.strip().splitlines()[-1])
    venv = str(Path(python).parents[1])
    assert all(p.startswith(venv) and not p.startswith(str(REPO)) for p in paths), paths

    # 1. tidemark demo (small), from the installed console script
    began = time.monotonic()
    out = _run(
        [
            str(bin_dir / "tidemark"),
            "demo",
            "--workdir",
            str(work / "demo"),
            "--hosts",
            "200",
            "--minutes",
            "6",
        ],
        work,
    )
    timings["demo_s"] = round(time.monotonic() - began, 1)
    assert "validation of demo" in out and "PASSED" in out, out[-3000:]
    # The demo on the machine's Java 17, as the JVM itself reports it (tests/spark/test_java_versions.py
    # runs it on Java 21): every window aligned, nothing unexplained, on time and final.
    assert re.search(r"Spark 4\.1\.\d+ on Java 17\.\d", out), out[:2000]
    assert "unexplained difference 0" in out, out[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("alignment on-time"))
    assert "final (latest revision, allowed lateness 1h): worst 1.0, 100.00% at target" in line, line
    config = work / "demo" / "demo.yaml"
    first = _reconciled(python, work, config)
    assert len(first["ms"]) == 6

    # 2. tidemark reconcile through spark-submit on the standalone cluster; executors' Python by conf
    apps_before = {a["id"] for a in cluster.master_state()["completedapps"]}
    began = time.monotonic()
    _run(
        [
            python,
            "-m",
            "tidemark.packaging",
            "submit",
            "reconcile_job.py",
            "--master",
            cluster.url,
            "--conf",
            f"spark.pyspark.python={python}",
            "--conf",
            "spark.executor.memory=1g",
            "--",
            "--config",
            str(config),
            "--start",
            START,
            "--end",
            END,
        ],
        work,
        TIDEMARK_SPARK_LOG_LEVEL="WARN",
    )
    timings["cluster_reconcile_s"] = round(time.monotonic() - began, 1)
    again = _reconciled(python, work, config)
    assert again == first  # the hour's rows replaced by the same numbers
    apps = [a for a in cluster.master_state()["completedapps"] if a["id"] not in apps_before]
    assert [(a["name"], a["state"]) for a in apps] == [("tidemark-reconcile-demo", "FINISHED")], apps

    # 3. The reconciliation DAG with `airflow dags test`, from a folder holding only the DAG files
    dags, pipelines, home = work / "dags", work / "pipelines", work / "airflow"
    for folder in (dags, pipelines, home):
        folder.mkdir()
    shipped = Path(paths[-1])  # the DAG files' package, printed last above
    for dag_file in shipped.glob("tidemark_*.py"):
        shutil.copy(dag_file, dags)
    assert sorted(p.name for p in dags.iterdir()) == [
        "tidemark_maintenance.py",
        "tidemark_pipeline_configs.py",
        "tidemark_reconciliation.py",
        "tidemark_stream_supervisor.py",
        "tidemark_watermark_monitor.py",
    ], f"the DAG files were not all shipped in {shipped}"
    shutil.copy(config, pipelines)
    airflow_env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "TIDEMARK_PIPELINES_DIR": str(pipelines),
        "AIRFLOW_CONN_TIDEMARK_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    }
    _run([str(bin_dir / "airflow"), "db", "migrate"], work, **airflow_env)
    began = time.monotonic()
    out = _run(
        [
            str(bin_dir / "airflow"),
            "dags",
            "test",
            "tidemark_reconciliation__demo",
            "--conf",
            json.dumps({"start": START, "end": END}),
            # the demo's bounded input never takes the watermark to end + allowed_lateness (1 h),
            # so its windows never become final: the final pass's wait is marked done
            *("--mark-success-pattern", "wait_for_final"),
        ],
        work,
        **airflow_env,
    )
    timings["dags_test_s"] = round(time.monotonic() - began, 1)
    finished = re.search(r"DagRun Finished: dag_id=tidemark_reconciliation__demo.*?state=(\w+)", out)
    assert finished and finished.group(1) == "success", out[-4000:]
    assert _reconciled(python, work, config) == first
    assert format_instant_ms(parse_instant_ms(START)) in out  # the DAG reconciled the given range
    print(f"\ninstalled package: {json.dumps(timings)}")
