"""The latency bench's input and arithmetic (bench/latency.py): its collectors heartbeat at their
own phases, keep each host's order, and its rows put the cold start apart."""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tidemark import generator
from tidemark.generator import Scenario, iter_buckets

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def latency():
    spec = importlib.util.spec_from_file_location("bench_latency", REPO / "bench" / "latency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _landed(monkeypatch, hosts_class, **overrides):
    """Every line of a small live-shaped scenario: (file index, host, event time, heartbeat)."""
    monkeypatch.setattr(generator, "_Hosts", hosts_class)
    s = Scenario(
        hosts=40,
        minutes=3,
        events_per_host_per_minute=6,
        file_span_s=10,
        heartbeat_every_s=10,
        duplicate_rate=0.0,
        malformed_rate=0.0,
        **overrides,
    )
    out = []
    for index, _end, lines in iter_buckets(s):
        for line in lines:
            r = json.loads(line)
            out.append((index, r["host"], int(r["event_time"]), bool(r.get("heartbeat"))))
    return s, out


def test_each_host_heartbeats_at_its_own_phase_after_its_records(monkeypatch, latency):
    s, lines = _landed(monkeypatch, latency.StaggeredHosts)
    phases = defaultdict(set)
    for _, host, et, beat in lines:
        if beat and et != s.end_ms:  # the final heartbeat is at the scenario's end
            phases[host].add(et % 10_000)
    assert len(phases) == s.hosts
    assert all(len(p) == 1 for p in phases.values()), phases  # one phase per host
    assert len({next(iter(p)) for p in phases.values()}) > s.hosts // 2  # not one shared phase
    # a heartbeat lands no earlier than any record of its host with an earlier event time
    for host in phases:
        mine = [(i, et, beat) for i, h, et, beat in lines if h == host]
        for i, et, beat in mine:
            if beat:
                assert all(j <= i for j, e, b in mine if not b and e < et), (host, et)


def test_the_generators_own_heartbeats_are_aligned(monkeypatch, latency):
    """The case the bench staggers: without it every heartbeat sits on the interval's multiples."""
    _, lines = _landed(monkeypatch, generator._Hosts)
    assert {et % 10_000 for _, _, et, beat in lines if beat} == {0}


def test_a_host_in_its_outage_sends_no_heartbeat(monkeypatch, latency):
    outage = {"lag_share": 0.05, "lag_minutes": 1.0, "lag_start_minute": 1}
    s, lines = _landed(monkeypatch, latency.StaggeredHosts, **outage)
    lagging = set(s.lagging_hosts())
    start, end = s.start_ms + 60_000, s.start_ms + 120_000
    assert lagging
    assert not [et for _, h, et, beat in lines if beat and h in lagging and start <= et < end]
    assert [et for _, h, et, beat in lines if beat and h not in lagging and start <= et < end]


def test_a_row_reports_the_cold_start_apart_and_the_excess_over_the_floor(latency):
    ends = np.array([10_000, 20_000, 30_000, 40_000, 50_000])
    commits = np.array([60_000, 60_000, 72_000, 83_000, 91_000])  # the first batch closed two
    floor = {10_000: 24_000, 20_000: 24_000, 30_000: 64_000, 40_000: 74_000, 50_000: 84_000}
    row = latency.latency_row("no lag", "Tidemark", ends, commits, 5, floor=floor)
    assert row[2] == "5/5"
    assert row[4] == "2: 50.0"  # two windows, the worse 50 s after its end
    assert row[5] == "42.0" and row[7] == "43.0"  # over the three warm windows only
    assert float(row[8]) == pytest.approx(np.percentile([8.0, 9.0, 7.0], 99), abs=0.05)
    floor_row = latency.latency_row("no lag", "floor", ends, commits, 5, cold_apart=False)
    assert floor_row[4] == "-" and floor_row[5] == "42.0" and floor_row[7] == "50.0"  # no cold start
