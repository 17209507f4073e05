"""The stream's metrics endpoint on a live stream, read by prometheus_client's exposition parser and
by a real Prometheus server (scripts/prometheus.sh installs it); promtool on the shipped rules.

200 hosts at precision 0.99 may leave 2 behind; 4 go through a 5-minute outage from minute 1, so
the watermark stalls until their backlog lands. The stream runs on a 1 s trigger while the files
land one per batch; after each batch's commit marker is in the ``watermarks`` table, the next
scrape must show that batch (its stall state, lagging hosts and watermark), and once the input is
done every counter must equal what the tables hold. A reconcile of the scenario then shows as the
latest reconciled hour. Prometheus scrapes the endpoint every second throughout, with the shipped
scrape config and alert rules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
import yaml
from helpers import listen_ports, small_scenario, write_config
from monitoring import (
    ALERT_TESTS,
    ALERTS,
    PROMETHEUS_YML,
    alert_queries,
    dashboard_queries,
    prometheus_bin,
    samples_of,
    scrape,
    scrape_text,
    value,
)

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.batch_steps import PHASES
from tidemark.generator import generate_files, write_file
from tidemark.reconcile import reconcile
from tidemark.stream import run_stream
from tidemark.timeutil import MS_PER_HOUR
from tidemark.watermark_status import STALLED

ONE_WORKER = True  # the tests read one live stream (a module fixture)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PIPELINE = "metrics"
SCRAPE_S = 1.0  # Prometheus's scrape interval here, and how soon a batch must show
LATE = 3  # records landed after their window closed


@dataclass
class Observation:
    """A committed batch's marker row and the first scrape that showed the batch."""

    marker: dict
    samples: dict
    delay_s: float  # from the marker being readable to that scrape
    text: str = ""  # the scrape as the endpoint answered it


@dataclass
class Live:
    config: object
    scenario: object
    truth: object
    endpoint: str
    prometheus: str
    observations: list[Observation] = field(default_factory=list)
    idle: dict = field(default_factory=dict)  # a scrape once every file is committed
    reconciled: dict = field(default_factory=dict)  # a scrape once the reconcile is read
    report: object = None


def _get_json(url: str) -> dict:
    try:
        with urlopen(url, timeout=10) as response:
            return json.loads(response.read().decode())
    except HTTPError as exc:  # Prometheus answers a bad query with 400 and a JSON error
        return json.loads(exc.read().decode())


def _wait(what: str, probe, timeout_s: float = 180, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def prometheus_dir() -> Path:
    return prometheus_bin()


def _start_prometheus(bin_dir: Path, root: Path, target: str, port: int) -> subprocess.Popen:
    """The real server with the shipped scrape config, its target and intervals made the test's."""
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    (job,) = config["scrape_configs"]
    job.update(scrape_interval="1s", scrape_timeout="1s", static_configs=[{"targets": [target]}])
    config["rule_files"] = [str(ALERTS)]
    path = root / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (root / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            str(bin_dir / "prometheus"),
            f"--config.file={path}",
            f"--storage.tsdb.path={root / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    log.close()

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {(root / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    _wait("prometheus to be ready", ready, timeout_s=60, every_s=0.25)
    return proc


def _land(staging: Path, landing: Path, name: str) -> None:
    """One file into the landing zone whole (a hidden name, then a rename), its mtime kept."""
    landing.mkdir(parents=True, exist_ok=True)
    hidden = landing / f".{name}.tmp"
    shutil.copy2(staging / name, hidden)
    os.rename(hidden, landing / name)


def _marker(config) -> dict | None:
    return T.latest_marker(config.table_path(S.WATERMARKS))


@pytest.fixture(scope="module")
def live(spark, prometheus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    port, prom_port = listen_ports(2)
    config = write_config(
        root,
        name=PIPELINE,
        trigger_interval="1s",
        source={"max_files_per_trigger": 1},
        watermark={"precision": 0.99, "stall_after": "0ms", "lag_threshold": "2m"},
        metrics={"prometheus_port": port, "reconcile_refresh": "1s"},
    )
    scenario = small_scenario(
        hosts=200,
        minutes=8,
        events_per_host_per_minute=2,
        lag_share=0.02,  # 4 of 200 > floor(0.01 * 200) = 2
        lag_minutes=5,
        lag_start_minute=1,
        duplicate_rate=0.02,
        malformed_rate=0.01,
        file_span_s=60,
        seed=5,
    )
    staging = root / "staging"
    truth = generate_files(scenario, staging)
    files = sorted(p.name for p in staging.glob("part-*"))
    # Last, once every window has closed: 3 records of minute 0, late and folded into a revision.
    late = [
        json.dumps(
            {
                "event_id": f"late-{i}",
                "host": "h00007",
                "event_time": scenario.start_ms + 30_000 + i,
                "key": "view",
            }
        )
        for i in range(LATE)
    ]
    files.append(write_file(staging, 999_999, late).name)
    truth.unique_events += LATE
    truth.lines += LATE
    landing = Path(config.source.path)
    endpoint = f"http://127.0.0.1:{port}/metrics"
    prometheus = _start_prometheus(prometheus_dir, root, f"127.0.0.1:{port}", prom_port)
    lines: list[str] = []
    failed: list[BaseException] = []

    def stream():
        try:
            run_stream(spark, config, once=False, echo=lines.append)
        except BaseException as exc:  # reported by the waits below
            failed.append(exc)

    thread = threading.Thread(target=stream, name="metrics-stream", daemon=True)
    live = Live(config, scenario, truth, endpoint, f"http://127.0.0.1:{prom_port}")
    try:
        _land(staging, landing, files[0])
        thread.start()
        for index in range(len(files)):
            if index:
                _land(staging, landing, files[index])

            def committed(index=index):
                if failed:
                    raise AssertionError(f"the stream failed: {failed[0]!r}\n" + "\n".join(lines[-20:]))
                marker = _marker(config)
                return marker if marker is not None and marker["batch_id"] >= index else None

            marker = _wait(f"batch {index}", committed)
            assert marker["batch_id"] == index, "one file, one batch"
            seen_at = time.monotonic()

            def shown(batch_id=marker["batch_id"]):
                text = scrape_text(endpoint)
                samples = samples_of(text)
                return (samples, text) if value(samples, "tidemark_last_batch_id") == batch_id else None

            samples, text = _wait(f"batch {index} on the endpoint", shown, timeout_s=30, every_s=0.05)
            live.observations.append(Observation(marker, samples, time.monotonic() - seen_at, text))
        live.idle = scrape(endpoint)
        stalled = next((o for o in live.observations if o.marker["state"] == STALLED), None)
        if stalled is not None:  # the example in docs/operations.md#metrics comes from here
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "stream_metrics_stalled.txt").write_text(stalled.text, encoding="utf-8")
        live.report = reconcile(spark, config, scenario.start_ms, scenario.end_ms)

        def reconciled():
            samples = scrape(endpoint)
            return samples if value(samples, "tidemark_reconcile_hour_windows") is not None else None

        live.reconciled = _wait("the reconciled hour on the endpoint", reconciled, timeout_s=30, every_s=0.25)
        time.sleep(3 * SCRAPE_S)  # Prometheus has scraped the reconciled hour too
        yield live
    finally:
        for query in spark.streams.active:
            if query.name == f"tidemark_{PIPELINE}":
                query.stop()
        thread.join(timeout=120)
        prometheus.terminate()
        try:
            prometheus.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait(timeout=30)


def _rows(config, table: str, columns: list[str]):
    frame = T.read_if_exists(config, table, columns)
    assert frame is not None, f"no {table} table"
    return frame


def test_a_stall_shows_within_one_scrape_and_the_counters_equal_the_tables(live):
    config, scenario, truth = live.config, live.scenario, live.truth
    observations = live.observations
    states = [o.marker["state"] for o in observations]
    assert STALLED in states and states[-1] != STALLED, f"the scenario should stall, then recover: {states}"
    lagging = len(scenario.lagging_hosts())
    for o in observations:  # each batch, as the first scrape after its commit marker shows it
        m, s = o.marker, o.samples
        where = f"batch {m['batch_id']} ({m['state']})"
        assert o.delay_s <= SCRAPE_S, f"{where}: on the endpoint {o.delay_s:.2f} s after its marker"
        assert value(s, "tidemark_watermark_stalled") == (1 if m["state"] == STALLED else 0), where
        assert value(s, "tidemark_hosts_lagging") == m["hosts_lagging"], where
        assert value(s, "tidemark_hosts_expected") == m["hosts_total"], where  # hosts seen so far
        watermark = value(s, "tidemark_watermark_timestamp_seconds")
        assert watermark == (None if m["watermark_ms"] is None else m["watermark_ms"] / 1000), where
        if m["state"] == STALLED:
            assert m["hosts_lagging"] == lagging, where
            assert value(s, "tidemark_watermark_stall_duration_seconds") >= 0
            assert value(s, "tidemark_hosts_lagging_allowed") == 2
        else:
            assert value(s, "tidemark_watermark_stall_duration_seconds") == 0, where
    assert value(observations[-1].samples, "tidemark_hosts_expected") == scenario.hosts
    first = next(o for o in observations if o.marker["state"] == STALLED)
    assert value(first.samples, "tidemark_watermark_stalled") == 1
    assert value(first.samples, "tidemark_hosts_lagging") == lagging == 4

    idle = live.idle
    events = _rows(config, S.EVENTS, ["event_id"])
    late = _rows(config, S.LATE_EVENTS, ["folded"])
    marks = _rows(config, S.WATERMARKS, ["batch_id", "run_id"])
    assert value(idle, "tidemark_events_total") == len(events) == truth.unique_events
    assert value(idle, "tidemark_late_events_total") == len(late) == LATE
    assert value(idle, "tidemark_late_folded_total") == int(late["folded"].sum()) == LATE
    assert value(idle, "tidemark_quarantined_total") == len(_rows(config, S.QUARANTINE, ["reason"]))
    assert value(idle, "tidemark_quarantined_total") == truth.malformed_lines
    windows = _rows(config, S.WINDOWS, ["revision"])
    assert value(idle, "tidemark_windows_closed_total") == (windows["revision"] == 0).sum()
    assert value(idle, "tidemark_window_revisions_total") == (windows["revision"] > 0).sum() > 0
    assert value(idle, "tidemark_batches_total") == len(marks) == len(observations)
    assert value(idle, "tidemark_last_batch_id") == marks["batch_id"].max()
    assert value(idle, "tidemark_retries_dropped_total") == truth.duplicate_copies > 0
    assert value(idle, "tidemark_heartbeats_total") == truth.heartbeats
    assert value(idle, "tidemark_input_rows_total") == truth.lines
    assert value(idle, "tidemark_replays_skipped_total") == 0
    assert value(idle, "tidemark_dedup_lookups_total") > 0
    assert value(idle, "tidemark_batch_duration_seconds_count") == len(observations)
    assert value(idle, "tidemark_stream_info", run_id=marks["run_id"].iloc[0], source="files") == 1
    assert value(idle, "tidemark_stream_start_timestamp_seconds") < value(
        idle, "tidemark_last_batch_timestamp_seconds"
    )
    phases = {dict(labels)["phase"] for (name, labels) in idle if name == "tidemark_last_batch_phase_seconds"}
    assert phases and phases <= set(PHASES), phases - set(PHASES)

    summary = live.report.summary()
    s = live.reconciled
    hour = scenario.start_ms // MS_PER_HOUR * MS_PER_HOUR
    assert summary.closed == scenario.minutes and summary.ok
    assert value(s, "tidemark_reconcile_hour_end_timestamp_seconds") == (hour + MS_PER_HOUR) / 1000
    assert value(s, "tidemark_reconcile_hour_windows") == summary.closed
    assert value(s, "tidemark_reconcile_hour_aligned_ratio") == summary.share_aligned == 1.0
    assert value(s, "tidemark_reconcile_hour_worst_alignment_ratio") == summary.worst_alignment
    assert value(s, "tidemark_reconcile_hour_unexplained") == summary.unexplained == 0
    assert value(s, "tidemark_reconcile_hour_misaligned_windows") == 0
    assert value(s, "tidemark_reconcile_read_errors_total") == 0


def _query(live: Live, expr: str, where: str = "") -> list[dict]:
    answer = _get_json(f"{live.prometheus}/api/v1/query?{urlencode({'query': expr})}")
    assert answer["status"] == "success", f"{where} {expr}: {answer}"
    return answer["data"]["result"]


def test_a_real_prometheus_scrapes_the_stream_and_answers_for_the_pipeline(live):
    targets = _get_json(f"{live.prometheus}/api/v1/targets")["data"]["activeTargets"]
    assert [(t["labels"]["job"], t["health"]) for t in targets] == [("tidemark", "up")]
    marks = _rows(live.config, S.WATERMARKS, ["watermark_ms"])

    (watermark,) = _query(live, f'tidemark_watermark_timestamp_seconds{{pipeline="{PIPELINE}"}}')
    assert watermark["metric"]["pipeline"] == PIPELINE and watermark["metric"]["job"] == "tidemark"
    assert float(watermark["value"][1]) == marks["watermark_ms"].max() / 1000

    (stalled,) = _query(live, f'tidemark_watermark_stalled{{pipeline="{PIPELINE}"}}')
    assert stalled["metric"]["pipeline"] == PIPELINE and stalled["value"][1] == "0"  # recovered
    # the stall, in the series Prometheus stored while it lasted
    (held,) = _query(live, f'max_over_time(tidemark_watermark_stalled{{pipeline="{PIPELINE}"}}[1h])')
    assert held["value"][1] == "1"
    (most,) = _query(live, f'max_over_time(tidemark_hosts_lagging{{pipeline="{PIPELINE}"}}[1h])')
    assert most["value"][1] == str(len(live.scenario.lagging_hosts()))
    (aligned,) = _query(live, f'tidemark_reconcile_hour_aligned_ratio{{pipeline="{PIPELINE}"}}')
    assert aligned["value"][1] == "1"

    groups = _get_json(f"{live.prometheus}/api/v1/rules")["data"]["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert {"TidemarkWatermarkStalled", "TidemarkAlignmentBelowTarget", "TidemarkStreamSilent"} <= set(rules)
    assert all(r["health"] == "ok" for r in rules.values()), {n: r.get("lastError") for n, r in rules.items()}


def test_every_dashboard_query_runs_on_the_real_server_and_returns_the_pipeline(live):
    for where, expr in dashboard_queries():
        query = expr.replace("$__rate_interval", "1m").replace("$pipeline", PIPELINE)
        result = _query(live, query, where)
        assert result, f"{where}: no data for {query}"
        assert all(r["metric"].get("pipeline") == PIPELINE for r in result), f"{where}: {result[:2]}"
    for where, expr in alert_queries():  # valid PromQL, whether or not it fires now
        _query(live, expr.replace("'x'", f"'{PIPELINE}'"), where)


def test_promtool_checks_the_shipped_config_and_rules_and_their_unit_tests_pass(prometheus_dir):
    promtool = str(prometheus_dir / "promtool")
    for args in (
        ["check", "config", str(PROMETHEUS_YML)],
        ["check", "rules", str(ALERTS)],
        ["test", "rules", str(ALERT_TESTS)],
    ):
        out = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"promtool {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    assert "SUCCESS" in out.stdout
