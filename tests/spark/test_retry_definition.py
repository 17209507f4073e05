"""One definition of a retry (tidemark.retries), and a stream whose answer does not depend on
where batches are cut: the same input, read 1, 2 or N files (Kafka offsets) a trigger, gives the
same events, windows, late events and quarantine, and the recompute agrees with it."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import oracle_window_counts, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark import dedup
from tidemark import tables as T
from tidemark.reconcile import reconcile
from tidemark.stream import run_stream

MINUTE = 60_000


def record(event_id: str, host: str, t: int, key: str = "k", value: float = 1.0) -> str:
    return json.dumps(
        {"event_id": event_id, "host": host, "event_time": t, "msg_time": t + 40, "key": key, "value": value}
    )


def heartbeat(host: str, t: int) -> str:
    return json.dumps({"host": host, "event_time": t, "heartbeat": True})


def start_ms() -> int:
    return (int(time.time() * 1000) // MINUTE - 12) * MINUTE


def land(landing: Path, files: list[tuple[int, list[str]]]) -> None:
    """Files ``(arrival_ms, lines)``: named in arrival order, stamped with their arrival."""
    landing.mkdir(parents=True, exist_ok=True)
    for i, (arrival, lines) in enumerate(files):
        path = landing / f"part-{i:04d}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (arrival / 1000, arrival / 1000))


def contents(config) -> dict[str, Counter]:
    """What a reader of the tables sees, less what says when it was written (batch, ingest time,
    the watermark of the batch): events, latest window revisions, late events, quarantine."""
    out: dict[str, Counter] = {}

    def read(name):  # each pipeline reads its own copy of the files: compare their names
        rows = T.read_local(config.table_path(name))
        return rows.assign(source=rows["source"].map(lambda s: s.rsplit("/", 1)[-1]))

    events = read("events")
    out["events"] = Counter(
        events[["event_id", "host", "event_time", "key", "value", "source", "arrival_ms"]].itertuples(
            index=False
        )
    )
    windows = T.read_local(config.table_path("windows"))
    newest = windows.sort_values("revision").groupby(["window_start", "key"]).last().reset_index()
    out["windows"] = Counter(newest[["window_start", "key", "events", "value_sum"]].itertuples(index=False))
    for name, columns in (
        ("late_events", ["event_id", "host", "event_time", "folded", "source"]),
        ("quarantine", ["raw", "reason", "source"]),
    ):
        path = config.table_path(name)
        rows = read(name) if T.table_exists(path) else None
        out[name] = Counter() if rows is None else Counter(rows[columns].itertuples(index=False))
    return out


CUT_HOSTS = ("a", "b", "c", "d")


def hosts_file(root: Path, hosts=CUT_HOSTS) -> str:
    """The expected hosts (a host not seen yet holds the watermark back, as a lagging one does)."""
    path = root / "hosts.txt"
    path.write_text("\n".join(hosts) + "\n")
    return str(path)


def assert_same(one: dict[str, Counter], other: dict[str, Counter]) -> None:
    """The same table contents, or the rows each has that the other lacks."""
    for table in one:
        extra, missing = one[table] - other[table], other[table] - one[table]
        assert not extra and not missing, (
            f"{table}: only in the first {dict(extra)}, only in the second {dict(missing)}"
        )


def stream_with(
    session,
    root: Path,
    landing: Path,
    name: str,
    per_trigger: int,
    hosts=CUT_HOSTS,
    precision=0.999,
    **overrides,
):
    """A fresh pipeline over a copy of ``landing`` (modification times kept), ``per_trigger``
    files a batch; returns its config and the batches it ran."""
    (root / name).mkdir(parents=True)
    config = write_config(
        root / name,
        name=name,
        source={"max_files_per_trigger": per_trigger},
        watermark={"precision": precision, "hosts_file": hosts_file(root / name, hosts)},
        **overrides,
    )
    shutil.copytree(landing, config.source.path, copy_function=shutil.copy2)
    processor = run_stream(session, config, once=True, echo=lambda m: None)
    return config, [s for s in processor.summaries if not s.skipped]


def assert_every_window_explained(spark, config, start: int, end: int) -> None:
    report = reconcile(spark, config, start, end, write=False)
    assert report.closed, "no window closed"
    for w in report.closed:
        assert w.unexplained == 0, (w, report.table())
        assert w.stream_events + w.late_events == w.batch_events
    oracle = oracle_window_counts(Path(config.source.path), horizon_ms=config.dedup_horizon)
    assert sum(w.batch_events for w in report.closed) == sum(
        n for (ws, _), n in oracle.items() if any(w.window_start_ms == ws for w in report.closed)
    )


# The reproduction: 20 hosts, 6 minutes, 600 records; host h3 sends two different records
# under one event_id, 10 s apart.
def reproduction(t0: int, files: int) -> list[tuple[int, list[str]]]:
    hosts = [f"h{i}" for i in range(20)]
    lines = [record(f"{h}-{i}", h, t0 + i * 12_000) for h in hosts for i in range(30)]
    reused = [
        record("reused-1", "h3", t0 + 150_000, value=2.0),
        record("reused-1", "h3", t0 + 160_000, value=3.0),
    ]
    closing = [heartbeat(h, t0 + 7 * MINUTE) for h in hosts]
    arrival = t0 + 7 * MINUTE + 5_000
    if files == 1:
        return [(arrival, lines + reused + closing)]
    return [(arrival, lines + reused[:1]), (arrival + 1_000, reused[1:] + closing)]


@pytest.mark.parametrize("per_trigger", [1, 2])
def test_the_reproduction_gives_the_same_windows_and_nothing_unexplained_either_way(
    spark, tmp_path, per_trigger
):
    t0 = start_ms()
    layouts = {}
    for files in (1, 2):
        landing = tmp_path / f"in-{files}"
        land(landing, reproduction(t0, files))
        hosts = [f"h{i}" for i in range(20)]
        config, batches = stream_with(spark, tmp_path, landing, f"rep{files}", per_trigger, hosts)
        assert sum(s.retries_dropped for s in batches) == 0, "a reused id at another time is no retry"
        assert_every_window_explained(spark, config, t0, t0 + 6 * MINUTE)
        layouts[files] = contents(config)
    assert layouts[1]["windows"] == layouts[2]["windows"]
    assert layouts[1]["events"].total() == layouts[2]["events"].total() == 602


def cut_input(t0: int) -> list[tuple[int, list[str]]]:
    """Six files a minute apart. Host ``d`` lags: its first five minutes arrive in file 4, so it
    holds the watermark back (precision 0.999 of four hosts: all four) and no record is late
    whatever the cut. They hold: a reused id in one file and across files; exact retries in one
    file and across files; a retry arriving beyond the 150 s horizon of its original, and a
    retry of that copy; bad lines; copies whose payload differs."""
    files: list[tuple[int, list[str]]] = [(t0 + (m + 1) * MINUTE + 1_000, []) for m in range(6)]
    for m in range(6):
        for h in CUT_HOSTS:
            lines = [record(f"{h}-{m}-{i}", h, t0 + m * MINUTE + i * 15_000) for i in range(4)]
            files[max(m, 4) if h == "d" else m][1].extend(lines)
    t = t0 + 30_000
    files[0][1].extend([record("dup-in", "a", t), record("dup-in", "a", t)])  # exact, one file
    files[0][1].append(record("reuse-in", "b", t0 + 5_000))
    files[0][1].append(record("reuse-in", "b", t0 + 50_000))  # reused in one file
    files[0][1].append(record("reuse-x", "c", t0 + 10_000))
    files[1][1].append(record("reuse-x", "c", t0 + 70_000))  # reused across files
    files[0][1].append(record("dup-x", "c", t0 + 20_000))
    files[1][1].append(record("dup-x", "c", t0 + 20_000))  # exact retry, next file (60 s later)
    files[0][1].append(record("dup-far", "a", t0 + 25_000))
    files[3][1].append(record("dup-far", "a", t0 + 25_000))  # 180 s later: beyond the horizon
    files[4][1].append(record("dup-far", "a", t0 + 25_000))  # 60 s after that copy: a retry
    files[2][1].append(record("same-host-id", "b", t0 + 2 * MINUTE + 1))
    files[2][1].append(record("same-host-id", "c", t0 + 2 * MINUTE + 1))  # another host: distinct
    files[2][1].append(record("payload", "b", t0 + 2 * MINUTE + 7, key="x", value=9.0))
    files[2][1].append(record("payload", "b", t0 + 2 * MINUTE + 7, key="y", value=1.0))  # first read wins
    files[1][1].append("{not json")
    files[3][1].append(json.dumps({"event_id": "nohost", "event_time": t0}))
    files[5][1].extend(heartbeat(h, t0 + 7 * MINUTE) for h in CUT_HOSTS)
    return files


def test_the_same_input_cut_into_1_2_and_n_batches_gives_the_same_tables(spark, tmp_path):
    t0 = start_ms()
    landing = tmp_path / "in"
    land(landing, cut_input(t0))
    seen = {}
    for per_trigger in (1, 2, 6):
        config, batches = stream_with(
            spark, tmp_path, landing, f"cut{per_trigger}", per_trigger, dedup_horizon="150s"
        )
        assert len(batches) == -(-6 // per_trigger)
        seen[per_trigger] = contents(config)
        assert_every_window_explained(spark, config, t0, t0 + 6 * MINUTE)
    assert_same(seen[1], seen[2])
    assert_same(seen[1], seen[6])
    events = seen[1]["events"]
    ids = Counter(e.event_id for e in events)
    assert ids["dup-in"] == ids["dup-x"] == 1  # exact retries, in one batch and across batches
    assert ids["reuse-in"] == ids["reuse-x"] == 2  # a reused id at another time is a record
    assert ids["same-host-id"] == 2
    assert ids["dup-far"] == 2  # the copy past the horizon counts again; the one after it does not
    assert [(e.key, e.value) for e in events if e.event_id == "payload"] == [("x", 9.0)]
    assert seen[1]["quarantine"].total() == 2 and seen[1]["late_events"].total() == 0


@pytest.fixture(params=["driver", "spark"])
def resolution(request, monkeypatch):
    if request.param == "spark":
        monkeypatch.setattr(dedup, "DRIVER_MAX_ROWS", 0)
    return request.param


def test_the_spark_resolved_path_keeps_the_same_records(spark, tmp_path, resolution):
    """Above DRIVER_MAX_ROWS suspects Spark resolves them: the same definition, the same rows."""
    t0 = start_ms()
    landing = tmp_path / "in"
    land(landing, cut_input(t0))
    config, _ = stream_with(spark, tmp_path, landing, f"res-{resolution}", 2, dedup_horizon="150s")
    ids = Counter(e.event_id for e in contents(config)["events"])
    assert (ids["dup-in"], ids["dup-x"], ids["reuse-in"], ids["reuse-x"], ids["dup-far"]) == (1, 1, 2, 2, 2)
    assert_every_window_explained(spark, config, t0, t0 + 6 * MINUTE)


def test_per_row_work_on_the_executors_writes_what_the_driver_writes(spark, tmp_path, monkeypatch):
    """``spark.per_row_work: executors``: Spark finds the suspects, reads the catalog and groups
    the counts per host (the driver's hash pass and catalog read would fail here); every table
    holds what the driver's way writes, and every window is explained by the recompute. Batches
    past the whole-batch route, which a small batch takes either way."""
    t0 = start_ms()
    landing = tmp_path / "in"
    land(landing, cut_input(t0))
    monkeypatch.setattr(dedup, "WHOLE_MAX_BYTES", 0)
    seen = {}
    for where in ("driver", "executors"):
        if where == "executors":
            monkeypatch.setattr(dedup, "_hash_pass", _no_per_row_pass)
            monkeypatch.setattr(dedup._Catalog, "_read_locally", _no_per_row_pass)
        config, batches = stream_with(
            spark, tmp_path, landing, f"prw-{where}", 2, dedup_horizon="150s", spark={"per_row_work": where}
        )
        assert not any("dedup_whole" in s.phases for s in batches)
        figures = [
            (s.events, s.heartbeats, s.quarantined, s.late, s.retries_dropped, s.retries_looked_up)
            for s in batches
        ] + [(s.out_of_order, s.hosts_reporting, s.watermark, s.windows_closed) for s in batches]
        seen[where] = contents(config), figures
        assert_every_window_explained(spark, config, t0, t0 + 6 * MINUTE)
    assert_same(seen["driver"][0], seen["executors"][0])
    assert seen["driver"][1] == seen["executors"][1]


def _no_per_row_pass(*args, **kwargs):
    raise AssertionError("spark.per_row_work: executors did per-row work on the driver")


def test_a_small_batch_cut_on_the_driver_writes_what_the_spark_path_writes(spark, tmp_path, monkeypatch):
    """A small batch of files is collected whole by its first Spark job and cut on the driver
    (tidemark.dedup: DedupResult.local); with that off, the same batches take the Spark path.
    Both write the same rows, with the same column types, in every table."""
    t0 = start_ms()
    landing = tmp_path / "in"
    land(landing, cut_input(t0))
    runs = {}
    for route, limit in (("whole", dedup.WHOLE_MAX_BYTES), ("spark", 0)):
        monkeypatch.setattr(dedup, "WHOLE_MAX_BYTES", limit)
        config, batches = stream_with(spark, tmp_path, landing, f"route-{route}", 2, dedup_horizon="150s")
        routes = {"dedup_whole" in s.phases for s in batches}
        assert routes == {route == "whole"}, (route, [s.phases for s in batches])
        types = {
            name: dict(T.read_local(config.table_path(name)).dtypes.astype(str))
            for name in ("events", "windows", "quarantine", "watermarks")
        }
        runs[route] = (contents(config), types)
        assert_every_window_explained(spark, config, t0, t0 + 6 * MINUTE)
    assert_same(runs["whole"][0], runs["spark"][0])
    assert runs["whole"][1] == runs["spark"][1]
    ids = Counter(e.event_id for e in runs["whole"][0]["events"])
    assert (ids["dup-in"], ids["dup-x"], ids["reuse-in"], ids["reuse-x"], ids["dup-far"]) == (1, 1, 2, 2, 2)
    assert runs["whole"][0]["quarantine"].total() == 2


def kafka_input(t0: int) -> list[tuple[str, int]]:
    """The cut input as Kafka records ``(line, timestamp)``, each host in one partition. A
    partition is read as far as the trigger allows whatever the others hold, so the copies of
    ``dup-far`` follow their original in the partition, their timestamps (arrivals) 180 and 240 s
    later: beyond the horizon, and in an open window whatever the cut."""
    far = record("dup-far", "a", t0 + 25_000)
    out: list[tuple[str, int]] = []
    for arrival, lines in cut_input(t0):
        for line in lines:
            if line != far:
                out.append((line, arrival))
            elif not any(o[0] == far for o in out):
                out += [(far, arrival), (far, arrival + 180_000), (far, arrival + 240_000)]
    return out


def test_kafka_read_in_small_and_large_triggers_gives_the_same_tables(spark, kafka, tmp_path):
    from tidemark.kafka import ensure_topic, flush, produce_line, producer

    t0 = start_ms()
    topic = f"cuts-{os.getpid()}-{int(time.time())}"
    ensure_topic(kafka.bootstrap, topic, partitions=2)
    to = producer(kafka.bootstrap)
    for line, arrival in kafka_input(t0):
        produce_line(to, topic, line, timestamp_ms=arrival)
    flush(to, kafka.bootstrap)
    seen = {}
    for per_trigger in (7, 100_000):
        (tmp_path / f"k{per_trigger}").mkdir()
        config = write_config(
            tmp_path / f"k{per_trigger}",
            name=f"k{per_trigger}",
            source={
                "kind": "kafka",
                "bootstrap_servers": kafka.bootstrap,
                "topic": topic,
                "max_offsets_per_trigger": per_trigger,
                "path": None,
            },
            watermark={"precision": 0.999, "hosts_file": hosts_file(tmp_path)},
            dedup_horizon="150s",
        )
        processor = run_stream(spark, config, once=True, echo=lambda m: None)
        batches = [s for s in processor.summaries if not s.skipped]
        assert (len(batches) > 5) == (per_trigger == 7)
        # small triggers: collected whole and cut on the driver once the offsets before them
        # count their records (the first has none); the one large trigger: Spark's route
        routes = ["dedup_whole" in s.phases for s in batches]
        assert routes == [False] + [True] * (len(batches) - 1), routes
        seen[per_trigger] = contents(config)
        report = reconcile(spark, config, t0, t0 + 6 * MINUTE, write=False)
        assert report.closed and all(w.unexplained == 0 for w in report.closed), report.table()
    assert_same(seen[7], seen[100_000])
    ids = Counter(e.event_id for e in seen[7]["events"])
    assert (ids["dup-in"], ids["dup-x"], ids["reuse-in"], ids["reuse-x"], ids["dup-far"]) == (1, 1, 2, 2, 2)


@st.composite
def random_input(draw, t0: int):
    """Hosts publishing in order, one file a minute; retries (same or later file), ids a host
    reuses at another time, a lagging host whose records land files later, bad lines."""
    n_hosts = draw(st.integers(3, 6))
    hosts = [f"r{i}" for i in range(n_hosts)]
    lagging = draw(st.sampled_from([None, *hosts]))
    lag = draw(st.integers(1, 3))
    minutes = 4
    n_files = minutes + 3
    files: list[list[str]] = [[] for _ in range(n_files)]
    for h in hosts:
        used: list[str] = []
        shift = lag if h == lagging else 0
        for m in range(minutes):
            for i in range(draw(st.integers(1, 3))):
                t = t0 + m * MINUTE + i * 17_000 + hosts.index(h)
                reuse = used and draw(st.booleans()) and draw(st.booleans())
                event_id = draw(st.sampled_from(used)) if reuse else f"{h}-{m}-{i}"
                used.append(event_id)
                line = record(event_id, h, t, key=draw(st.sampled_from(["k", "q"])))
                at = m + shift
                files[at].append(line)
                if draw(st.integers(0, 4)) == 0:  # a retry, in this file or up to two later
                    files[min(at + draw(st.integers(0, 2)), n_files - 2)].append(line)
        files[n_files - 1].append(heartbeat(h, t0 + (minutes + 1) * MINUTE))
    if draw(st.booleans()):
        files[draw(st.integers(0, n_files - 1))].append("{broken")
    return hosts, [(t0 + (i + 1) * MINUTE + 500, lines) for i, lines in enumerate(files)]


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_random_input_cut_anywhere_equals_the_recompute(spark, tmp_path_factory, data):
    """Random inputs with retries, reused ids and lagging hosts, read in random cuts: every
    closed window is explained (the stream's latest revision + late records = the recompute)."""
    t0 = start_ms() - 2 * MINUTE
    hosts, files = data.draw(random_input(t0))
    root = tmp_path_factory.mktemp("prop")
    landing = root / "in"
    land(landing, files)
    config, _ = stream_with(
        spark,
        root,
        landing,
        "prop",
        data.draw(st.integers(1, len(files)), label="files per trigger"),
        hosts,
        precision=data.draw(st.sampled_from([0.5, 0.999]), label="precision"),
        dedup_horizon=data.draw(st.sampled_from(["24h", "90s"]), label="horizon"),
        window={"size": "1m", "allowed_lateness": data.draw(st.sampled_from(["0s", "1h"]), label="lateness")},
    )
    assert_every_window_explained(spark, config, t0, t0 + 4 * MINUTE)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(["x", "y"]),
            st.sampled_from([1_000, 2_000]),
            st.integers(0, 400),
            st.sampled_from(["t/0@", "f1"]),
            st.integers(0, 12),
            st.sampled_from(["k", "q"]),
        ),
        max_size=30,
    ),
    horizon=st.sampled_from([0, 150, 10_000]),
)
def test_spark_and_the_driver_keep_the_same_copies(spark, rows, horizon):
    """keep_copies (Spark: the recompute, many suspects) and kept_mask (the driver) are one rule,
    Kafka offsets compared as numbers (``@9`` before ``@10``)."""
    import pandas as pd

    from tidemark.retries import keep_copies, kept_mask, with_read_order

    data = [
        (i, h, e, t, a, f"{s}{o}" if s.endswith("@") else s, k, 1.0)
        for i, (h, e, t, a, s, o, k) in enumerate(rows)
    ]
    schema = (
        "i long, host string, event_id string, event_time long, arrival_ms long, source string, "
        "key string, value double"
    )
    frame = with_read_order(spark.createDataFrame(data, schema))
    by_spark = {r["i"] for r in keep_copies(frame, horizon).select("i").collect()}
    local = frame.toPandas() if data else pd.DataFrame(columns=frame.columns)
    by_driver = set(local["i"][kept_mask(local, horizon)]) if data else set()
    assert by_spark == by_driver
