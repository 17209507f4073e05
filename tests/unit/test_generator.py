from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tidemark.generator import Scenario, generate_files, iter_buckets, read_manifest


def _records(directory):
    for f in sorted(directory.glob("part-*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield f.name, rec


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    s = Scenario(hosts=20, minutes=3, events_per_host_per_minute=5, seed=1)
    generate_files(s, tmp_path / "a")
    generate_files(s, tmp_path / "b")
    generate_files(Scenario(hosts=20, minutes=3, events_per_host_per_minute=5, seed=2), tmp_path / "c")
    a = [p.read_bytes() for p in sorted((tmp_path / "a").glob("part-*"))]
    assert a == [p.read_bytes() for p in sorted((tmp_path / "b").glob("part-*"))]
    assert a != [p.read_bytes() for p in sorted((tmp_path / "c").glob("part-*"))]


def test_each_hosts_records_stay_in_event_time_order_across_files(tmp_path):
    s = Scenario(hosts=30, minutes=4, events_per_host_per_minute=8, lag_share=0.1, duplicate_rate=0.0)
    generate_files(s, tmp_path)
    last: dict[str, int] = defaultdict(lambda: -1)
    for _, rec in _records(tmp_path):
        if "event_id" in rec and isinstance(rec.get("host"), str):
            assert rec["event_time"] >= last[rec["host"]]
            last[rec["host"]] = rec["event_time"]


def test_truth_counts_match_the_files(tmp_path):
    s = Scenario(hosts=40, minutes=3, events_per_host_per_minute=10, duplicate_rate=0.1, malformed_rate=0.05)
    truth = generate_files(s, tmp_path)
    ids = [
        r["event_id"]
        for _, r in _records(tmp_path)
        if isinstance(r.get("event_id"), str)
        and isinstance(r.get("host"), str)
        and isinstance(r.get("event_time"), int)
        and not r["event_id"].startswith(("bad-", "x-", "y-"))
    ]
    assert len(set(ids)) == truth.unique_events == 40 * 3 * 10
    assert len(ids) - len(set(ids)) == truth.duplicate_copies > 0
    assert truth.malformed_lines > 0 and truth.heartbeats == 40
    manifest = read_manifest(tmp_path)
    assert manifest["truth"]["unique_events"] == truth.unique_events


def test_lagging_hosts_records_of_the_outage_land_together_when_it_ends(tmp_path):
    s = Scenario(
        hosts=100,
        minutes=6,
        events_per_host_per_minute=4,
        lag_share=0.05,
        lag_minutes=2,
        lag_start_minute=1,
        duplicate_rate=0.2,
        malformed_rate=0.0,
        file_span_s=60,
    )
    generate_files(s, tmp_path)
    lagging = set(s.lagging_hosts())
    assert len(lagging) == 5
    outage = (s.start_ms + 60_000, s.start_ms + 180_000)
    seen: dict[str, str] = {}
    later_copies = 0
    held_files = set()
    for name, rec in _records(tmp_path):
        if rec.get("heartbeat"):
            continue
        if rec["event_id"] in seen:
            later_copies += name > seen[rec["event_id"]]
            continue
        seen[rec["event_id"]] = name
        if rec["host"] in lagging and outage[0] <= rec["event_time"] < outage[1]:
            held_files.add(name)
    assert held_files == {"part-000003.jsonl"}  # all land in the file after the outage ends
    assert later_copies > 0


def test_files_are_written_whole_and_ordered_by_modification_time(tmp_path):
    generate_files(Scenario(hosts=10, minutes=3, events_per_host_per_minute=2), tmp_path)
    files = sorted(tmp_path.glob("part-*.jsonl"))
    assert not list(tmp_path.glob(".*.tmp"))
    mtimes = [f.stat().st_mtime for f in files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)


def test_buckets_come_out_in_file_order():
    indexes = [i for i, _, _ in iter_buckets(Scenario(hosts=5, minutes=5, events_per_host_per_minute=3))]
    assert indexes == sorted(indexes)


def test_invalid_scenario_names_the_field():
    with pytest.raises(ValueError, match="scenario: invalid value for hosts, lag_share"):
        Scenario(hosts=0, lag_share=2)


def test_live_mode_starts_at_now_and_paces_each_file_to_its_arrival_span(tmp_path):
    from tidemark.generator import generate_live
    from tidemark.timeutil import now_ms

    waits: list[float] = []
    before = now_ms()
    truth = generate_live(
        Scenario(hosts=5, minutes=2, events_per_host_per_minute=3, file_span_s=30, duplicate_rate=0.0),
        tmp_path,
        sleep=waits.append,
    )
    manifest = read_manifest(tmp_path)
    assert before - 1000 <= manifest["scenario"]["start_ms"] <= now_ms()
    assert truth.files == len(list(tmp_path.glob("part-*.jsonl"))) >= 4
    # each file waits until its span has passed: later files wait longer
    assert waits and all(w > 0 for w in waits) and waits == sorted(waits)
    assert max(waits) <= 2 * 60 + 30 + 5  # the final heartbeats land in the span after the last minute


def test_live_mode_with_history_writes_the_past_at_once_dated_at_arrival_then_paces_the_rest(
    tmp_path, monkeypatch
):
    import tidemark.generator as generator
    from tidemark.timeutil import now_ms

    # a fixed clock half-way into a second: which files are past is then exact, however slow the machine
    frozen = now_ms() // 1000 * 1000 + 500
    monkeypatch.setattr(generator, "now_ms", lambda: frozen)
    waits: list[float] = []
    generator.generate_live(
        Scenario(hosts=5, minutes=4, events_per_host_per_minute=3, file_span_s=30, duplicate_rate=0.0),
        tmp_path,
        sleep=waits.append,
        history_minutes=2,
    )
    start = read_manifest(tmp_path)["scenario"]["start_ms"]
    assert start == frozen - 500 - 2 * 60_000
    files = sorted(tmp_path.glob("part-*.jsonl"))
    past = [f for f in files if (start + (int(f.stem[5:]) + 1) * 30_000) < frozen]
    assert len(past) == 4  # the first two minutes, written without waiting
    # each past file is dated at its arrival time (the file source reads oldest first)
    for f in past:
        assert f.stat().st_mtime == pytest.approx((start + (int(f.stem[5:]) + 1) * 30_000) / 1000, abs=0.01)
    assert len(waits) == len(files) - len(past) and all(w > 0 for w in waits)


def test_collector_heartbeats_follow_every_earlier_record_and_skip_the_outage(tmp_path):
    s = Scenario(
        hosts=30, minutes=4, events_per_host_per_minute=2, lag_share=0.1, lag_minutes=2, lag_start_minute=1,
        duplicate_rate=0.0, malformed_rate=0.0, file_span_s=10, heartbeat_every_s=10,
    )  # fmt: skip
    truth = generate_files(s, tmp_path)
    lagging = set(s.lagging_hosts())
    outage = (s.start_ms + 60_000, s.start_ms + 180_000)
    newest: dict[str, int] = defaultdict(lambda: -1)  # each host's newest event time read so far
    ticks: dict[str, list[int]] = defaultdict(list)
    for _, rec in _records(tmp_path):
        host, et = rec["host"], rec["event_time"]
        if rec.get("heartbeat"):
            assert et >= newest[host], (
                f"{host}'s heartbeat at {et} arrived before its record at {newest[host]}"
            )
            if et < s.end_ms:
                ticks[host].append(et)
        newest[host] = max(newest[host], et)
    every = list(range(s.start_ms, s.end_ms, 10_000))
    assert all(ticks[h] == every for h in s.host_names if h not in lagging)
    for host in lagging:  # a host in its outage claims nothing
        assert ticks[host] == [t for t in every if not outage[0] <= t < outage[1]]
    assert truth.heartbeats == sum(len(t) for t in ticks.values()) + s.hosts  # and the final ones
