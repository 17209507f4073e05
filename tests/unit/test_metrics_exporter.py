"""The stream's metrics endpoint without Spark: the exporter's families and their names, the gauges
of the newest batch and the counters, the latest reconciled hour read from a real Delta table (and
its cache), the endpoint's HTTP server, the config block; and the shipped monitoring files
(docker/monitoring/) against the exporter's real output and the docs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.request import urlopen

import pytest
import yaml
from helpers import listen_ports, write_config
from monitoring import (
    DASHBOARD,
    alert_queries,
    alert_rules,
    dashboard_queries,
    exposition_names,
    promql_metric_names,
    scrape,
    value,
)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidemark import schemas as S
from tidemark import tables as T
from tidemark.alignment import CLOSED, OPEN, WindowResult, to_arrow
from tidemark.batch_steps import PHASES, BatchSummary
from tidemark.config import ConfigError, parse_config
from tidemark.errors import SetupError
from tidemark.metrics import METRICS, ReconcileCollector, StreamMetrics, registry_for, serve
from tidemark.metrics_catalog import COUNTER
from tidemark.timeutil import MS_PER_HOUR, MS_PER_MINUTE, parse_instant_ms

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"
HOUR = parse_instant_ms("2025-11-22T10:00:00Z")
NOW_S = HOUR / 1000 + 3 * 3600  # the tests' wall clock: 13:00


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stalled_batch(batch_id: int = 7, **overrides) -> BatchSummary:
    fields = dict(
        batch_id=batch_id,
        events=1_000,
        heartbeats=20,
        late=12,
        late_folded=10,
        quarantined=3,
        retries_dropped=15,
        retries_looked_up=40,
        watermark=HOUR + 5 * MS_PER_MINUTE,
        frontier_ms=HOUR + 9 * MS_PER_MINUTE,
        stall_since_ms=int(NOW_S * 1000) - 300_000,
        hosts_total=200,
        hosts_reporting=198,
        hosts_required=198,
        hosts_lagging=4,
        state="STALLED",
        windows_closed=5,
        revisions=2,
        open_windows=9,
        seconds=2.0,
        phases={"load_state": 0.1, "dedup_hashes": 0.4, "write_events": 0.6, "write_marker": 0.2},
    )
    fields.update(overrides)
    return BatchSummary(**fields)


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path, name="m", metrics={"prometheus_port": listen_ports(1)[0]})


def windows_of_hour(hour_ms: int, *, misaligned: int = 0, unexplained: int = 0, open_: int = 0):
    """A reconciled hour: 60 one-minute windows, the first ``misaligned`` at alignment 0.99 (one of
    them with ``unexplained`` records), the last ``open_`` still open."""
    out = []
    for i in range(60):
        start = hour_ms + i * MS_PER_MINUTE
        if i >= 60 - open_:
            out.append(
                WindowResult(
                    window_start_ms=start, status=OPEN, stream_events=0, batch_events=100, late_events=0,
                    abs_diff=0, alignment=None, unexplained=0,
                )
            )  # fmt: skip
            continue
        stream = 99 if i < misaligned else 100
        gap = unexplained if i == 0 else 0
        out.append(
            WindowResult(
                window_start_ms=start, window_end_ms=start + MS_PER_MINUTE, status=CLOSED,
                stream_events=stream - gap, batch_events=100, late_events=100 - stream,
                abs_diff=100 - stream + gap, alignment=(stream - gap) / 100, aligned=stream - gap >= 99.9,
                unexplained=gap,
            )
        )  # fmt: skip
    return out


def write_hour(config, windows, reconciled_at_ms: int) -> None:
    data = to_arrow(
        windows,
        pipeline=config.pipeline,
        target=0.999,
        stream_watermark_ms=None,
        reconciled_at_ms=reconciled_at_ms,
    )
    T.write_rs(config.table_path(S.RECONCILIATION), data, mode="append")


def families(registry) -> dict:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_every_metric_is_exported_with_its_type_a_pipeline_label_and_prometheus_naming(config):
    metrics = StreamMetrics(config, clock=Clock(NOW_S))
    registry = registry_for(metrics, config)
    write_hour(config, windows_of_hour(HOUR), reconciled_at_ms=HOUR + 2 * MS_PER_HOUR)
    metrics.observe(stalled_batch())
    exported = families(registry)
    spec_names = {m.name.removesuffix("_total") if m.kind == COUNTER else m.name: m for m in METRICS}
    assert set(exported) == set(spec_names), "exported families differ from tidemark.metrics.METRICS"
    for name, family in exported.items():
        spec = spec_names[name]
        assert family.type == spec.kind, name
        assert name.startswith("tidemark_") and re.fullmatch(r"[a-z_]+", name), name
        assert family.samples, f"{name} has no sample once a batch and an hour are in"
        for sample in family.samples:
            assert sample.labels["pipeline"] == "m", sample
            assert set(sample.labels) - {"le"} == {"pipeline", *spec.labels}, sample
        if spec.kind == COUNTER:
            assert spec.name.endswith("_total") and not name.endswith("_total"), spec.name
        elif re.search(r"timestamp|duration|_lag(_|$)", name):
            assert name.endswith("_seconds"), f"{name}: a time is in seconds, and says so"
        if name.endswith("_ratio"):
            assert all(0 <= s.value <= 1 for s in family.samples), name


def test_the_gauges_follow_the_newest_batch_and_the_counters_add_up(config):
    clock = Clock(NOW_S)
    metrics = StreamMetrics(config, clock=clock)
    metrics.started("run-1")
    registry = registry_for(metrics, config)
    before = scrape_registry(registry)
    assert value(before, "tidemark_batches_total") == 0
    assert value(before, "tidemark_watermark_stalled") is None  # no batch yet: no sample
    assert value(before, "tidemark_stream_start_timestamp_seconds") == NOW_S
    assert value(before, "tidemark_stream_info", run_id="run-1", mode="exactly_once", source="files") == 1

    metrics.observe(stalled_batch(7))
    metrics.observe(BatchSummary(7, skipped=True))  # a replay after a restart: counted apart
    clock.now += 60
    s = scrape_registry(registry)
    assert value(s, "tidemark_last_batch_id") == 7
    assert value(s, "tidemark_last_batch_timestamp_seconds") == NOW_S
    assert value(s, "tidemark_watermark_stalled") == 1
    assert value(s, "tidemark_hosts_lagging") == 4
    assert value(s, "tidemark_hosts_lagging_allowed") == 2
    assert value(s, "tidemark_hosts_expected") == 200 and value(s, "tidemark_hosts_reporting") == 198
    # at the scrape: 5 minutes of stall before the batch, one more since
    assert value(s, "tidemark_watermark_stall_duration_seconds") == 360
    assert value(s, "tidemark_watermark_timestamp_seconds") == (HOUR + 5 * MS_PER_MINUTE) / 1000
    assert value(s, "tidemark_watermark_frontier_lag_seconds") == 240
    assert value(s, "tidemark_watermark_lag_seconds") == NOW_S + 60 - (HOUR + 5 * MS_PER_MINUTE) / 1000
    assert value(s, "tidemark_last_batch_input_rows") == 1_000 + 20 + 3 + 15
    assert value(s, "tidemark_last_batch_input_rows_per_second") == 1_038 / 2.0
    assert value(s, "tidemark_last_batch_delta_commit_seconds") == pytest.approx(0.8)
    assert value(s, "tidemark_last_batch_phase_seconds", phase="dedup_hashes") == 0.4
    assert value(s, "tidemark_batches_total") == 1 and value(s, "tidemark_replays_skipped_total") == 1
    assert value(s, "tidemark_batch_duration_seconds_count") == 1
    assert value(s, "tidemark_batch_duration_seconds_bucket", le="1.0") == 0
    assert value(s, "tidemark_batch_duration_seconds_bucket", le="2.5") == 1

    metrics.observe(stalled_batch(8, state="ADVANCING", stall_since_ms=None, hosts_lagging=0, seconds=0.4))
    s = scrape_registry(registry)
    assert value(s, "tidemark_watermark_stalled") == 0
    assert value(s, "tidemark_watermark_stall_duration_seconds") == 0
    expected = {
        "tidemark_events_total": 2_000,
        "tidemark_heartbeats_total": 40,
        "tidemark_late_events_total": 24,
        "tidemark_late_folded_total": 20,
        "tidemark_quarantined_total": 6,
        "tidemark_retries_dropped_total": 30,
        "tidemark_dedup_lookups_total": 80,
        "tidemark_windows_closed_total": 10,
        "tidemark_window_revisions_total": 4,
        "tidemark_input_rows_total": 2 * 1_038,
        "tidemark_batches_total": 2,
        "tidemark_batch_duration_seconds_count": 2,
        "tidemark_batch_duration_seconds_sum": 2.4,
    }
    assert {k: value(s, k) for k in expected} == pytest.approx(expected)
    assert value(s, "tidemark_batch_phase_seconds_total", phase="write_events") == pytest.approx(1.2)
    assert value(s, "tidemark_delta_commit_seconds_total") == pytest.approx(1.6)
    assert {dict(ls)["phase"] for (n, ls) in s if n == "tidemark_batch_phase_seconds_total"} == set(PHASES)

    metrics.observe(BatchSummary(9, watermark=None, state="WAITING", hosts_total=3, seconds=0.1))
    s = scrape_registry(registry)
    assert value(s, "tidemark_watermark_timestamp_seconds") is None  # WAITING: no watermark yet
    assert value(s, "tidemark_watermark_lag_seconds") is None


def scrape_registry(registry) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }


def test_the_latest_reconciled_hour_is_read_from_the_table_at_most_every_refresh(config):
    clock = Clock(100.0)
    collector = ReconcileCollector(config, refresh_s=30, clock=clock)
    registry = _registry(collector)
    s = scrape_registry(registry)
    assert value(s, "tidemark_reconcile_hour_windows") is None  # no table yet: no sample
    assert value(s, "tidemark_reconcile_alignment_target_ratio") == 0.999

    write_hour(config, windows_of_hour(HOUR), reconciled_at_ms=HOUR + 2 * MS_PER_HOUR)
    nxt = HOUR + MS_PER_HOUR
    write_hour(
        config, windows_of_hour(nxt, misaligned=3, unexplained=2, open_=5), reconciled_at_ms=nxt + 7_200_000
    )
    assert value(scrape_registry(registry), "tidemark_reconcile_hour_windows") is None  # cached
    clock.now += 30
    s = scrape_registry(registry)
    assert value(s, "tidemark_reconcile_hour_end_timestamp_seconds") == (nxt + MS_PER_HOUR) / 1000
    assert value(s, "tidemark_reconcile_hour_windows") == 55
    assert value(s, "tidemark_reconcile_hour_open_windows") == 5
    assert value(s, "tidemark_reconcile_hour_misaligned_windows") == 3
    assert value(s, "tidemark_reconcile_hour_aligned_ratio") == pytest.approx(52 / 55)
    assert value(s, "tidemark_reconcile_hour_worst_alignment_ratio") == pytest.approx(0.97)
    assert value(s, "tidemark_reconcile_hour_unexplained") == 2
    assert value(s, "tidemark_reconcile_hour_reconciled_timestamp_seconds") == (nxt + 7_200_000) / 1000
    assert collector.reads == 1

    clock.now += 30  # the table has not moved: only its version is read
    assert scrape_registry(registry) == s and collector.reads == 1

    def broken(path):
        raise OSError("storage unreachable")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "open_if_exists", broken)
        clock.now += 30
        s2 = scrape_registry(registry)
    assert value(s2, "tidemark_reconcile_read_errors_total") == 1
    assert value(s2, "tidemark_reconcile_hour_windows") == 55  # the values before it are kept
    assert "storage unreachable" in collector.error


def _registry(collector):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def test_the_endpoint_serves_its_own_registry_and_a_port_in_use_is_one_line(config):
    endpoint = serve(config, echo=lambda m: None)
    try:
        assert endpoint.url == f"http://127.0.0.1:{config.metrics.prometheus_port}/metrics"
        endpoint.metrics.observe(stalled_batch())
        with urlopen(endpoint.url, timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        s = scrape(endpoint.url)
        assert value(s, "tidemark_watermark_stalled", pipeline="m") == 1
        # its own registry: nothing of prometheus_client's global one (process_*, python_gc_*)
        assert all(name.startswith("tidemark_") for name, _ in s)
        with pytest.raises(
            SetupError, match=rf"^metrics: cannot listen on 127\.0\.0\.1:{config.metrics.prometheus_port} "
        ):
            serve(config, echo=lambda m: None)
    finally:
        endpoint.close()
    serve(config, echo=lambda m: None).close()  # closed: the port is free for the next run


def test_the_metrics_block_is_off_by_default_and_checked():
    base = {"pipeline": "p", "source": {"path": "l"}, "warehouse": "w", "checkpoint": "c"}
    config = parse_config(base)
    assert config.metrics.prometheus_port is None and config.metrics.host == "127.0.0.1"
    assert config.metrics.reconcile_refresh == 30_000
    on = parse_config({**base, "metrics": {"prometheus_port": 9108, "host": "0.0.0.0"}})
    assert on.metrics.prometheus_port == 9108
    with pytest.raises(
        ConfigError, match=r"metrics\.prometheus_port: Input should be less than or equal to 65535"
    ):
        parse_config({**base, "metrics": {"prometheus_port": 70_000}})
    with pytest.raises(ConfigError, match=r"metrics\.host: 'http://x' must be a host name or an IP address"):
        parse_config({**base, "metrics": {"host": "http://x"}})
    with pytest.raises(ConfigError, match=r"metrics\.port: unknown key"):
        parse_config({**base, "metrics": {"port": 9108}})


# -- the shipped monitoring files ------------------------------------------------------------------


def exporter_output(config) -> str:
    """The exporter's real output after a batch and a reconciled hour: every family has samples."""
    metrics = StreamMetrics(config, clock=Clock(NOW_S))
    registry = registry_for(metrics, config)
    write_hour(config, windows_of_hour(HOUR, misaligned=1), reconciled_at_ms=HOUR + 2 * MS_PER_HOUR)
    metrics.observe(stalled_batch())
    return generate_latest(registry).decode()


def test_every_dashboard_and_alert_query_names_only_metrics_the_exporter_exports(config):
    exported = exposition_names(exporter_output(config))
    queries = dashboard_queries() + alert_queries()
    assert len(queries) >= 30
    unknown = {
        where: sorted(names - exported)
        for where, expr in queries
        if (names := promql_metric_names(expr) - {"up"}) - exported
    }
    assert not unknown, f"queries name metrics the exporter does not export: {unknown}"
    # what the dashboard is for: each of these is plotted
    used = set().union(*(promql_metric_names(expr) for _, expr in dashboard_queries()))
    for name in (
        "tidemark_watermark_lag_seconds",
        "tidemark_hosts_lagging",
        "tidemark_batch_duration_seconds_bucket",
        "tidemark_batch_phase_seconds_total",
        "tidemark_input_rows_total",
        "tidemark_late_events_total",
        "tidemark_late_folded_total",
        "tidemark_reconcile_hour_aligned_ratio",
        "tidemark_stream_start_timestamp_seconds",
    ):
        assert name in used, f"the dashboard does not plot {name}"


def test_promql_metric_names_reads_selectors_not_functions_labels_or_keywords():
    expr = (
        'sum by (pipeline, phase) (rate(a_total{pipeline=~"$pipeline", phase!="x y"}[$__rate_interval]))'
        " / on (pipeline) group_left () sum by (pipeline) (rate(b_total[5m])) > 1e3 and c offset 5m"
        " unless histogram_quantile(0.95, d_bucket) or time() - e_seconds > 10 * 60"
    )
    assert promql_metric_names(expr) == {"a_total", "b_total", "c", "d_bucket", "e_seconds"}


def test_the_dashboard_is_a_grafana_dashboard_with_the_promised_panels():
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dash["uid"] == "tidemark-stream" and dash["schemaVersion"] >= 36 and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "pipeline"}
    for panel in dash["panels"]:
        assert panel["type"] in ("timeseries", "stat") and set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all('{pipeline=~"$pipeline"}' in t["expr"] for t in panel["targets"]), panel["title"]
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for words in ("watermark lag", "lagging hosts", "batch time", "phase", "input rate", "late", "folded"):
        assert words in titles, words
    assert "alignment by hour" in titles and "restarts" in titles


def _anchors(markdown: str) -> set[str]:
    """The heading anchors of a page as the site makes them: an explicit ``{#id}`` (attr_list),
    else the toc extension's slug of the heading."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.M):
        explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
        if explicit:
            out.add(explicit.group(1))
            continue
        slug = re.sub(r"[^\w\s-]", "", heading.strip().lower())
        out.add(re.sub(r"\s+", "-", slug).strip("-"))
    return out


def test_every_alert_links_its_runbook_in_the_docs_and_the_dashboard():
    anchors = _anchors(OPERATIONS.read_text(encoding="utf-8"))
    uid = json.loads(DASHBOARD.read_text(encoding="utf-8"))["uid"]
    names = set()
    for rule in alert_rules():
        names.add(rule["alert"])
        notes = rule["annotations"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, f"{rule['alert']}: {notes['runbook_url']}"
        assert anchor.startswith("runbook-"), notes["runbook_url"]
        assert notes["dashboard"].startswith(f"/d/{uid}/"), notes["dashboard"]
        assert rule["labels"]["severity"] in ("page", "ticket")
        assert notes["summary"] and notes["description"]
    assert {"TidemarkWatermarkStalled", "TidemarkAlignmentBelowTarget", "TidemarkStreamSilent"} <= names
    scrape_config = yaml.safe_load((DASHBOARD.parent / "prometheus.yml").read_text())
    assert scrape_config["rule_files"] == ["tidemark-alerts.yml"]
    assert [job["job_name"] for job in scrape_config["scrape_configs"]] == ["tidemark"]


def test_the_operations_page_lists_every_metric_with_its_type(config):
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(tidemark_\w+)` \| (\w+) \|", section, flags=re.M))
    assert rows == {m.name: m.kind for m in METRICS}, (
        "docs/operations.md#metrics differs from tidemark.metrics.METRICS"
    )
    # the example scrape output in the section parses, and names only exported metrics
    example = re.search(r"```text\n(# HELP tidemark_.*?)```", section, flags=re.S)
    assert example, "no example scrape output"
    assert exposition_names(example.group(1)) <= exposition_names(exporter_output(config))
