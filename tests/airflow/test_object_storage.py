"""Every location on S3: landing files, warehouse and checkpoint on the S3 API server the project
starts (scripts/s3.sh: moto's standalone server on loopback). The stream is SIGKILLed inside
batches and restarted from its S3 checkpoint, then checked against an independent recompute of
the local copy of the landing files; reconcile, the quality step, the Airflow watermark sensor
and its trigger read the same locations; and the demo runs on S3 end to end.

Credentials come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), the
endpoint from the config's ``storage:`` block: the path a user takes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import listen_ports, oracle_good_records, oracle_window_counts, small_scenario, write_config

from tidemark import liveness, object_store, revisions, storage
from tidemark import tables as T
from tidemark.generator import generate_files
from tidemark.maintenance import MAINTAINED_FILE, plan
from tidemark.timeutil import now_ms

ONE_WORKER = True
pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "tidemark-test",
    "AWS_SECRET_ACCESS_KEY": "tidemark-test-secret",
    "AWS_REGION": "us-east-1",
}
JOB_TIMEOUT_S = 420
# A kill right after three different writes of three batches: each restart replays a batch that
# is committed in some tables and not in others, now with every table and the checkpoint on S3.
KILL_POINTS = ["after:events@1", "after:_state/host_progress@3", "before:watermarks@5"]


class S3Server:
    """The project's S3 API server (scripts/s3.sh) on a free loopback port."""

    def __init__(self, directory: Path) -> None:
        [port] = listen_ports(1)
        self.env = {**os.environ, "TIDEMARK_S3_DIR": str(directory), "TIDEMARK_S3_PORT": str(port)}
        self.url = f"http://127.0.0.1:{port}"

    def run(self, action: str) -> None:
        subprocess.run(
            [str(REPO / "scripts" / "s3.sh"), action], env=self.env, check=True, capture_output=True
        )


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.run("start")
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.run("stop")


def cli(*args: str, timeout: float = JOB_TIMEOUT_S, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli", *args],
        env={**os.environ, "TIDEMARK_SPARK_LOG_LEVEL": "ERROR", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def run_pipeline(s3, root: Path):
    """A small scenario generated locally (the oracle's copy), uploaded to s3a://tidemark-test/crash,
    streamed with a SIGKILL at each of KILL_POINTS, then to the end."""
    location = "s3a://tidemark-test/crash"
    config = write_config(
        root,
        name="crash",
        source={"path": f"{location}/landing"},
        warehouse=f"{location}/warehouse",
        checkpoint=f"{location}/checkpoints/crash",
        storage={"endpoint": s3.url, "path_style": True},
        # due at the first batch (the record below is an hour old), then each minute
        maintenance={"schedule": "* * * * *"},
        # the scenario has 2 of 50 hosts (4%) in an outage: the quality step's bounds for it
        reconcile={"target": 0.9},
        quality={"thresholds": {"max_late_share": 0.5}},
    )
    local = root / "landing"
    truth = generate_files(small_scenario(), local)
    object_store.ensure_bucket(location)
    object_store.upload_tree(local, config.source.path)
    arrivals = _arrivals(config.source.path)
    record = storage.location(config.tables_root) / MAINTAINED_FILE
    storage.write_text_atomic(record, json.dumps({"maintained_at_ms": now_ms() - 3_600_000}))
    config_path = root / "crash.yaml"
    logs = []
    for point in KILL_POINTS:
        done = cli("stream", "--config", str(config_path), "--once", env={"TIDEMARK_KILL_AT": point})
        assert done.returncode == -signal.SIGKILL, f"{point} not reached:\n{done.stdout[-3000:]}"
        logs.append(done.stdout)
    done = cli("stream", "--config", str(config_path), "--once")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logs.append(done.stdout)
    return config_path, config, truth, local, arrivals, "\n".join(logs)


def _arrivals(landing: str) -> dict[str, int]:
    """Each uploaded file's S3 LastModified (ms): what the stream sees as its arrival."""
    import pyarrow.fs as pafs

    fs, root = object_store.filesystem(landing)
    infos = fs.get_file_info(pafs.FileSelector(root))
    return {i.base_name: int(i.mtime.timestamp() * 1000) for i in infos if i.type == pafs.FileType.File}


def check_every_location_is_on_s3(pipeline) -> None:
    _path, config, _truth, _local, _arrivals, _log = pipeline
    assert all(storage.is_object_store(x) for x in storage.config_locations(config))
    written = object_store.list_files(config.tables_root)
    assert any(f.startswith("events/_delta_log/") for f in written)
    checkpoint = object_store.list_files(config.checkpoint)
    assert any(f.startswith("offsets/") for f in checkpoint) and any(
        f.startswith("commits/") for f in checkpoint
    )
    assert "_tidemark.json" in written and "_tidemark.json" in checkpoint  # the run identity, on S3


def check_the_stream_maintains_its_own_tables(pipeline) -> None:
    path, config, _truth, _local, _arrivals, log = pipeline
    assert config.maintained_in_stream  # by default, for a warehouse on object storage
    assert "maintenance due (* * * * *): running between two batches" in log
    assert "maintained" in log and "tables in" in log
    record = json.loads((storage.location(config.tables_root) / MAINTAINED_FILE).read_text())
    assert record["maintained_at_ms"] > now_ms() - 600_000 and record["seconds"] is not None
    assert {"events", "windows", "watermarks", "_state/host_progress"} <= {t for t, _ in plan(config)}
    # one writer per table: `tidemark maintain` refuses beside a live stream (a fresh heartbeat)
    heartbeat = storage.location(config.checkpoint) / "_tidemark_alive.json"
    beat = {**liveness.ProcessIdentity.self().record(), "written_at_ms": now_ms(), "stopped": False}
    storage.write_text_atomic(heartbeat, json.dumps(beat))
    done = cli("maintain", "--config", str(path))
    storage.write_text_atomic(heartbeat, json.dumps({**beat, "stopped": True}))
    assert done.returncode != 0 and "maintains the tables itself" in done.stderr, done.stderr[-2000:]


def check_exactly_once(pipeline) -> None:
    _path, config, truth, local, arrivals, _log = pipeline
    oracle = oracle_good_records(local, arrivals)
    events = T.read_local(config.table_path("events"))
    assert len(events) == len(oracle) == truth.unique_events, "events lost or duplicated"
    assert events["event_id"].is_unique
    combined: dict = {}
    windows = revisions.normalized(T.read_local(config.table_path("windows")))
    assert not windows.duplicated(["window_start", "key", "revision"]).any(), "a revision was written twice"
    # the latest revision of each window + the late records not folded into it
    for row in revisions.latest(windows).itertuples():
        key = (_ms(row.window_start), row.key)
        combined[key] = combined.get(key, 0) + row.events
    if T.table_exists(config.table_path("late_events")):
        late = T.read_local(config.table_path("late_events"))
        assert late["event_id"].is_unique
        for row in late[~late["folded"].astype(bool)].itertuples():
            key = (_ms(row.window_start), row.key)
            combined[key] = combined.get(key, 0) + 1
    assert combined == dict(oracle_window_counts(local, arrivals=arrivals)), "windows + late differ"
    assert len(T.read_local(config.table_path("quarantine"))) == truth.malformed_lines
    marks = T.read_local(config.table_path("watermarks")).sort_values("batch_id")
    assert marks["batch_id"].is_unique, "a batch committed twice"
    values = [v for v in marks["watermark_ms"] if v == v and v is not None]
    assert values == sorted(values), "watermark moved backwards"
    for (_, before), (_, after) in itertools.pairwise(marks.iterrows()):
        assert after["previous_ms"] == before["watermark_ms"], f"batch {after['batch_id']} did not resume"


def _ms(value) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def check_reconcile_and_quality(pipeline) -> None:
    path, _config, _truth, _local, _arrivals, _log = pipeline
    done = cli("reconcile", "--config", str(path), "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    closed = [w for w in report["windows"] if w["status"] == "closed"]
    assert closed, "no closed window reconciled"
    assert all(w["unexplained"] == 0 for w in closed), [w for w in closed if w["unexplained"]][:3]
    done = cli("validate", "--config", str(path), "--json", "--no-docs")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcome = json.loads(done.stdout[done.stdout.index("{") :])
    assert outcome["success"] is True


def check_watermark_sensor_and_trigger(pipeline) -> None:
    from tidemark_airflow.sensors import WatermarkSensor
    from tidemark_airflow.triggers import WatermarkTrigger, committed_watermark

    path, _config, _truth, _local, _arrivals, _log = pipeline
    watermark, state = committed_watermark(str(path))
    assert watermark is not None, state
    sensor = WatermarkSensor(task_id="wait", config_path=str(path), deferrable=False)

    def context(end_ms: int) -> dict:
        end = datetime.fromtimestamp(end_ms / 1000, tz=UTC)
        start = datetime.fromtimestamp((end_ms - 3_600_000) / 1000, tz=UTC)
        return {"data_interval_start": start, "data_interval_end": end}

    # an interval is due once its last (1-minute) window is closed: the watermark past its end
    closed = watermark - watermark % 60_000
    assert sensor.poke(context(closed)) is True
    assert sensor.poke(context(closed + 60_000)) is False

    async def first_event(target: int):
        trigger = WatermarkTrigger(str(path), target - 3_600_000, target, "on_time", poll_interval=0.2)
        return await asyncio.wait_for(anext(trigger.run()), 60)

    event = asyncio.run(first_event(closed))
    assert event.payload["status"] == "passed" and event.payload["watermark_ms"] == watermark
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(first_event(closed + 60_000), 3))


def test_stream_kills_maintenance_reconcile_quality_and_sensor_on_s3(s3, tmp_path):
    # One test, not one per step: under pytest-xdist a worker whose queue runs dry tears the
    # module's fixtures down, and the stream runs would then be repeated for the next step.
    pipeline = run_pipeline(s3, tmp_path)
    check_every_location_is_on_s3(pipeline)
    check_exactly_once(pipeline)
    check_the_stream_maintains_its_own_tables(pipeline)
    check_reconcile_and_quality(pipeline)
    check_watermark_sensor_and_trigger(pipeline)
    check_the_secret_is_nowhere(pipeline, tmp_path)


def check_the_secret_is_nowhere(pipeline, local_root: Path) -> None:
    """Security finding 3: after the whole run (stream with kills, maintenance, reconcile, the
    quality step and its reports, the sensor), no file it wrote holds the storage secret: every
    object under the run's S3 location and every local file (logs, reports, GX, configs)."""
    secret = CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    location = "s3a://tidemark-test/crash"
    objects = object_store.list_files(location)
    assert objects, "nothing written on S3"
    leaks = [o for o in objects if secret in object_store.ObjectPath(f"{location}/{o}").read_bytes()]
    leaks += [str(p) for p in local_root.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert not leaks, f"the storage secret is written in {leaks}"


def test_demo_runs_with_every_location_on_s3(s3, tmp_path):
    done = cli(
        "demo",
        "--workdir", str(tmp_path / "demo"),
        "--location", "s3a://tidemark-demo/demo",
        "--s3-endpoint", s3.url,
        "--s3-path-style",
        "--hosts", "500",
        "--minutes", "8",
        env={"TIDEMARK_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    # GX's context and the report stay on a local disk: $TIDEMARK_HOME/var/quality/<pipeline>
    assert (tmp_path / "var" / "quality" / "demo" / "reconciliation.html").is_file()
    assert "unexplained difference 0" in done.stdout
    assert "tables under s3a://tidemark-demo/demo/warehouse/demo/" in done.stdout
    assert not (tmp_path / "demo" / "warehouse").exists(), "the demo wrote tables locally"
