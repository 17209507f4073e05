"""Shared test helpers: small scenarios, configs, and an independent oracle.

The oracle re-implements the record contract in plain Python (json + dict checks, no Spark),
so the stream's results are compared against something that shares none of its code.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from pathlib import Path

import yaml

from tidemark.config import PipelineConfig, load_config
from tidemark.generator import Scenario, generate_files
from tidemark.sparkenv import JVM_OPTIONS_ENV

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
MIN_EVENT_TIME = 946_684_800_000  # 2000-01-01
MAX_SKEW = 5 * 60_000


def suite_jvm_options() -> dict[str, str]:
    """The suite's JVM options for short jobs (tests/conftest.py: C1 only), for a test that builds
    a user's or deployer's environment from scratch: they set the same variable, and without it
    every job, executor and DAG task of that test runs with C2 (the examples and installed-wheel
    tests, 2 paired runs: 374-376 CPU-s with C2, 240-244 without)."""
    options = os.environ.get(JVM_OPTIONS_ENV)
    return {JVM_OPTIONS_ENV: options} if options else {}


def small_scenario(**overrides) -> Scenario:
    base = dict(
        hosts=50,
        minutes=6,
        events_per_host_per_minute=10,
        lag_share=0.04,  # 2 of 50 hosts
        lag_minutes=2.0,
        duplicate_rate=0.05,
        malformed_rate=0.01,
        file_span_s=30,
        seed=7,
    )
    base.update(overrides)
    return Scenario(**base)


def write_config(root: Path, name: str = "t", **overrides) -> PipelineConfig:
    data = {
        "pipeline": name,
        "source": {"kind": "files", "path": str(root / "landing"), "max_files_per_trigger": 2},
        "warehouse": str(root / "warehouse"),
        "checkpoint": str(root / "checkpoints" / name),
        "window": "1m",
        "watermark": {"precision": 0.96},
        "spark": {"shuffle_partitions": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_config(path)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def oracle_good_records(
    landing: Path, arrivals: dict[str, int] | None = None, horizon_ms: int = 86_400_000
) -> dict[tuple, dict]:
    """Unique valid records by (host, event_id, event_time), by the contract, in plain Python. A
    file's arrival is its modification time, or ``arrivals[name]`` (ms) when given (the copy the
    stream read is elsewhere, e.g. on object storage). Files are read in arrival order, then name;
    a copy arriving more than ``horizon_ms`` after the last copy that counted counts again (under
    a key of its own: ``(host, event_id, event_time, n)`` for the n-th)."""
    unique: dict[tuple, dict] = {}
    last: dict[tuple, int] = {}
    files = [f for f in landing.iterdir() if not f.name.startswith(("_", "."))]
    timed = [
        (arrivals[f.name] if arrivals is not None else int(os.stat(f).st_mtime * 1000), f.name, f)
        for f in files
    ]
    for arrival, _, file in sorted(timed):
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or rec.get("heartbeat") is True:
                continue
            eid, host, et = rec.get("event_id"), rec.get("host"), rec.get("event_time")
            if not (isinstance(eid, str) and eid.strip() and isinstance(host, str)):
                continue
            if not (HOST_RE.match(host) and _is_int(et) and et >= MIN_EVENT_TIME):
                continue
            mt = rec.get("msg_time")
            if mt is not None and not _is_int(mt):
                continue
            if (mt is not None and et - mt > MAX_SKEW) or et - arrival > MAX_SKEW:
                continue
            if rec.get("key") is not None and not isinstance(rec["key"], str):
                continue
            key = (host, eid, et)
            if key in last and arrival - last[key] <= horizon_ms:
                continue
            n = sum(1 for k in unique if k[:3] == key) if key in last else 0
            unique[key if n == 0 else (*key, n)] = rec
            last[key] = arrival
    return unique


def oracle_window_counts(
    landing: Path,
    window_ms: int = 60_000,
    arrivals: dict[str, int] | None = None,
    horizon_ms: int = 86_400_000,
) -> Counter:
    counts: Counter = Counter()
    for rec in oracle_good_records(landing, arrivals, horizon_ms).values():
        et = rec["event_time"]
        counts[(et - et % window_ms, rec.get("key") or "")] += 1
    return counts


def _window_rows(spark, config: PipelineConfig) -> tuple[dict, Counter, Counter, int]:
    """(latest revision per (window_ms, key) as (events, late folded in), all late records and
    those not folded in per (window_ms, key), (window, key, revision) rows written twice)."""
    from pyspark.sql import functions as F

    windows = spark.read.format("delta").load(config.table_path("windows"))
    cols = set(windows.columns)
    rows = windows.select(
        F.unix_millis("window_start").alias("w"),
        "key",
        "events",
        (F.col("revision") if "revision" in cols else F.lit(0)).alias("revision"),
        (F.col("late_events") if "late_events" in cols else F.lit(0)).alias("late_events"),
    ).collect()
    newest: dict = {}
    revisions: Counter = Counter()
    for r in rows:
        k = (r["w"], r["key"])
        revisions[(k, r["revision"])] += 1
        if k not in newest or r["revision"] > newest[k][0]:
            newest[k] = (r["revision"], r["events"], r["late_events"])
    late_all: Counter = Counter()
    beyond: Counter = Counter()
    late_path = Path(config.table_path("late_events"))
    if (late_path / "_delta_log").is_dir():
        late = spark.read.format("delta").load(str(late_path))
        folded = F.col("folded") if "folded" in late.columns else F.lit(False)
        for r in late.select(
            F.unix_millis("window_start").alias("w"), "key", folded.alias("folded")
        ).collect():
            late_all[(r["w"], r["key"])] += 1
            if not r["folded"]:
                beyond[(r["w"], r["key"])] += 1
    duplicates = sum(n - 1 for n in revisions.values() if n > 1)
    return {k: (v[1], v[2]) for k, v in newest.items()}, late_all, beyond, duplicates


def stream_window_counts(spark, config: PipelineConfig) -> tuple[Counter, Counter, int]:
    """(the latest revision of each window + the late records not folded into it, per
    (window_ms, key); all late records per (window_ms, key); (window, key, revision) rows written
    more than once)."""
    newest, late_all, beyond, duplicates = _window_rows(spark, config)
    combined: Counter = Counter({k: v[0] for k, v in newest.items()})
    combined.update(beyond)
    return +combined, late_all, duplicates


def ontime_window_counts(spark, config: PipelineConfig) -> Counter:
    """The on-time result of each window (its events less the late records folded in, what
    revision 0 held) + every late record, per (window_ms, key)."""
    newest, late_all, _, _ = _window_rows(spark, config)
    combined: Counter = Counter({k: v[0] - v[1] for k, v in newest.items()})
    combined.update(late_all)
    return +combined


def closed_only(counts: Counter, watermark_ms: int, window_ms: int = 60_000) -> Counter:
    return Counter({k: v for k, v in counts.items() if k[0] + window_ms <= watermark_ms})


def assert_exactly_once(spark, config: PipelineConfig, truth) -> None:
    """Windows + late events equal the independent recompute exactly; nothing stored twice."""
    from pyspark.sql import functions as F

    landing = Path(config.source.path)

    def table(name):
        return spark.read.format("delta").load(config.table_path(name))

    oracle = oracle_good_records(landing)
    events = table("events")
    assert events.count() == len(oracle) == truth.unique_events, "events lost or duplicated"
    assert events.select("host", "event_id", "event_time").distinct().count() == events.count()
    combined, _late, duplicate_rows = stream_window_counts(spark, config)
    assert duplicate_rows == 0, "a window revision was written twice"
    oracle_counts = oracle_window_counts(landing)
    assert combined == oracle_counts, "latest window revisions + late beyond lateness differ from the oracle"
    assert ontime_window_counts(spark, config) == oracle_counts, "on-time windows + every late record differ"
    assert_revisions_well_formed(spark, config)
    if (Path(config.table_path("late_events")) / "_delta_log").is_dir():  # no late records: no table
        late_rows = table("late_events")
        assert late_rows.select("host", "event_id", "event_time").distinct().count() == late_rows.count()
    assert table("quarantine").count() == truth.malformed_lines, "quarantine lost or repeated"
    marks = table("watermarks").select("batch_id", "watermark_ms").orderBy("batch_id").collect()
    assert len({m["batch_id"] for m in marks}) == len(marks), "a batch committed twice"
    values = [m["watermark_ms"] for m in marks if m["watermark_ms"] is not None]
    assert values == sorted(values), "watermark moved backwards"
    # Each batch resumed from exactly the watermark the batch before it committed, across kills.
    full = table("watermarks").select("batch_id", "watermark_ms", "previous_ms").orderBy("batch_id").collect()
    for before, after in itertools.pairwise(full):
        assert after["previous_ms"] == before["watermark_ms"], f"batch {after['batch_id']} did not resume"
    assert table("windows").where(F.col("window_end") > F.col("low_watermark")).count() == 0


def assert_revisions_well_formed(spark, config: PipelineConfig) -> None:
    """Per (window, key): revisions 0, 1, 2, ... each once, accumulating, at most one final; a
    revision after the first comes from a later batch; revision 0 of a window with on-time
    records is written by the batch whose watermark closed it."""
    rows = (
        spark.read.format("delta")
        .load(config.table_path("windows"))
        .selectExpr("unix_millis(window_start) AS w", "key", "revision", "is_final", "events", "batch_id")
        .collect()
    )
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["w"], r["key"]), []).append(r)
    for key, group in groups.items():
        group.sort(key=lambda r: r["revision"])
        assert [r["revision"] for r in group] == list(range(len(group))), f"revisions of {key}"
        assert sum(bool(r["is_final"]) for r in group) <= 1, f"more than one final row for {key}"
        assert all(
            a["events"] <= b["events"] and a["batch_id"] < b["batch_id"] for a, b in itertools.pairwise(group)
        )
        assert all(not r["is_final"] for r in group[:-1]), f"a revision after the final one for {key}"


def kafka_pipeline(root: Path, kafka, topic: str, name: str = "kfk"):
    """Publish a scenario to ``topic`` and write the same scenario as files for the oracle."""
    scenario = small_scenario(seed=21)
    config = write_config(
        root,
        name=name,
        source={
            "kind": "kafka",
            "bootstrap_servers": kafka.bootstrap,
            "topic": topic,
            "max_offsets_per_trigger": 700,
            "path": None,
            "max_files_per_trigger": 1,
        },
    )
    oracle_config = write_config(root, name=f"{name}-oracle")  # landing files of the same scenario
    from tidemark.kafka import publish_scenario

    truth = generate_files(scenario, oracle_config.source.path)
    published = publish_scenario(scenario, kafka.bootstrap, topic)
    assert published.lines == truth.lines
    return scenario, config, oracle_config, truth


def commit_adds(table_path: str | Path, version: int) -> list[dict]:
    """The add actions of commit ``version`` in a Delta table's log (its JSON, read directly)."""
    log = Path(table_path) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]


def listen_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free to listen on, below the kernel's ephemeral range:
    a port the kernel handed out by ``bind(0)`` can be taken again, between the check and the
    server's bind, by any process's outgoing connection (each uses an ephemeral local port)."""
    import random
    import socket

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    pick = random.SystemRandom()  # not the random module's state, which a test may have seeded
    ports: list[int] = []
    while len(ports) < count:
        port = pick.randrange(20_000, max(min(low, 32_768), 20_500))
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def filtered_context(dockerfile_ignore: Path, dest: Path) -> Path:
    """The build context Docker sends for a Dockerfile: the repository's tracked files its
    ``.dockerignore`` lets through (last matching pattern wins), copied under ``dest``."""
    import shutil
    import subprocess

    import pathspec

    root = Path(__file__).resolve().parents[1]
    lines = dockerfile_ignore.read_text().splitlines()
    spec = pathspec.PathSpec.from_lines(
        "gitwildmatch", [x for x in lines if x.strip() and not x.startswith("#")]
    )
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if not spec.match_file(name) and (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
    return dest


def sign_in(page, base: str, user: str, password: str) -> None:
    """Log in to Airflow's UI as a person does (the simple auth manager's form)."""
    page.goto(f"{base}/", wait_until="domcontentloaded")
    page.locator("input[name=username]").fill(user)
    page.locator("input[name=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=60_000)


def open_hour_report(page, section, pipeline: str, start: str):
    """Click the view's link to the hour starting at ``start`` (ISO) and return the report's
    page, checked to be that pipeline's report with the verdict "stream agrees with batch"."""
    from playwright.sync_api import expect

    link = section.locator(f'a.hour-report[data-start="{start}"]')
    expect(link).to_have_count(1)
    with page.expect_popup() as popup:
        link.click()
    report = popup.value
    report.wait_for_load_state("domcontentloaded")
    expect(report.locator("h1")).to_contain_text(f"Tidemark reconciliation — {pipeline}")
    expect(report.locator("#verdict")).to_have_text("stream agrees with batch")
    return report


def files_holding(root: Path, needle: str, follow_symlinks: bool = True) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle`` (a secret that must not be on disk)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and (follow_symlinks or not path.is_symlink()):
            try:
                if needle.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    return found
