"""The benchmark tables in the docs are generated from the raw results (bench/report.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(name: str):
    """``bench/<name>.py`` as a module (the bench scripts import their neighbours, benchlib)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return module


def _report():
    return _bench("report")


def test_the_docs_tables_are_the_ones_the_committed_results_give():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "report.py"), "--check", "--sync-only"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_the_check_refuses_figures_measured_on_other_code(tmp_path, monkeypatch):
    """A block whose results came from an older spark_jobs/, or from uncommitted changes in it,
    fails --check by name; the same block measured on HEAD's passes."""
    report = _report()
    results = tmp_path / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    monkeypatch.setattr(report, "RESULTS", results)
    newest = report.newest("dedup_old_retry")
    data = json.loads(newest.read_text())
    docs = tmp_path / "benchmarks.md"
    docs.write_text("intro\n\n<!-- bench:dedup_old_retry -->\nx\n<!-- /bench:dedup_old_retry -->\n")
    docs.write_text(report.regenerate(docs.read_text()))
    monkeypatch.setattr(report, "DOCS", (docs,))
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["report.py", "--check"])
    monkeypatch.setattr(report, "changed_since", lambda commit: None if commit == "head" else "older")
    for commit, dirty, fails in (("old1234", False, True), ("head", True, True), ("head", False, False)):
        newest.write_text(
            json.dumps({**data, "commit": commit, "dirty": {"spark_jobs": dirty, "tree": dirty}})
        )
        docs.write_text(report.regenerate(docs.read_text()))
        if fails:
            with pytest.raises(
                SystemExit, match=r"1 block\(s\) measured on another spark_jobs/.*dedup_old_retry"
            ):
                report.main()
        else:
            report.main()
        monkeypatch.setattr(sys, "argv", ["report.py", "--check", "--sync-only"])
        report.main()  # the blocks match their results either way
        monkeypatch.setattr(sys, "argv", ["report.py", "--check"])


def test_a_changed_result_changes_its_block_and_the_check_names_the_file(tmp_path, monkeypatch):
    report = _report()
    results = tmp_path / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    monkeypatch.setattr(report, "RESULTS", results)
    before = report.block("dedup_old_retry")
    newest = report.newest("dedup_old_retry")
    data = json.loads(newest.read_text())
    data["lookup"]["per range"]["files"] = 123
    newest.write_text(json.dumps(data))
    after = report.block("dedup_old_retry")
    assert "123 of 868" in after and "123 of 868" not in before
    docs = tmp_path / "benchmarks.md"
    docs.write_text((REPO / "docs" / "benchmarks.md").read_text())
    monkeypatch.setattr(report, "DOCS", (docs,))
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["report.py", "--check"])
    with pytest.raises(SystemExit, match=r"out of date in benchmarks\.md"):
        report.main()


def test_the_check_does_not_depend_on_what_git_knows_of_the_measured_commit(monkeypatch):
    """A shallow clone or no git says a block is stale where a full checkout does not: the
    check compares the blocks without that sentence."""
    report = _report()
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    fresh = report.regenerate(docs)
    monkeypatch.setattr(
        report, "changed_since", lambda commit: f"{report.STALE} commit {commit} is unknown here."
    )
    stale = report.regenerate(docs)
    assert stale != fresh
    assert report.without_staleness(stale) == report.without_staleness(fresh)


def test_a_tagged_run_has_its_own_block_and_never_stands_for_the_untagged_one(tmp_path, monkeypatch):
    report = _report()
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(report, "RESULTS", results)
    for name in (
        "latency-2026-11-25.json",
        "latency-2026-11-26-no-heartbeats.json",  # newer, but a variant
        "latency-2026-11-25-no-heartbeats.json",
        "latency_other-2026-11-27.json",  # another bench sharing the prefix
        "soak-2026-11-25T0959.jsonl",
        "soak-2026-11-25T1255.jsonl",
    ):
        (results / name).write_text("{}")
    assert report.newest("latency").name == "latency-2026-11-25.json"
    assert report.newest("latency@no-heartbeats").name == "latency-2026-11-26-no-heartbeats.json"
    assert report.newest("soak").name == "soak-2026-11-25T1255.jsonl"
    with pytest.raises(SystemExit, match="no results for latency@hb"):
        report.newest("latency@hb")


def _goals():
    return _bench("goals")


def _peer_runs(peer_walls: list[float]) -> dict:
    runs = []
    for round_, wall in enumerate(peer_walls, start=1):
        runs.append({"round": round_, "system": "spark_peer", "k": 1, "wall_s": wall})
        runs.append(
            {"round": round_, "system": "exactly_once", "k": 1, "wall_s": 10.0, "batch_s": 8.0, "batches": 3,
             "phases_s": {"write_events": 4.0, "dedup_hashes": 2.5, "load_state": 0.1}}
        )  # fmt: skip
    return {"commit": "abc1234", "sizes": [1], "input": {"lines": 1000, "clean_lines": 1000}, "runs": runs}


def test_the_goal_table_grades_each_goal_from_its_results():
    """bench/goals.py: the paired ratios' median against the goal, the spread, the commit, and
    where the time goes when a goal is not met; a bench with no results is a row saying so."""
    goals = _goals()
    met = goals.render({"peers": _peer_runs([12.0, 25.0, 20.0])})  # ratios 1.2, 2.5, 2.0
    row = next(line for line in met.splitlines() if "plain-Spark peer (1 files" in line)
    assert "| 2.00 (1.20-2.50) | abc1234 | met |" in row
    missed = goals.render({"peers": _peer_runs([12.0, 13.0, 14.0])})  # 1.2, 1.3, 1.4
    row = next(line for line in missed.splitlines() if "plain-Spark peer (1 files" in line)
    assert "| 1.30 (1.20-1.40) | abc1234 | **NOT met** |" in row
    assert "8.0 s in 3 batches (write_events 4.0 s, dedup_hashes 2.5 s, load_state 0.1 s)" in row
    assert "| latency@lagging | no results | - | **NOT met** |" in missed

    latency = {
        "commit": "def5678",
        "args": {"trigger": "10s"},
        "rows": [
            ["no lag", "floor: the landed records", "100/100", "-", "-", "10.0", "14.0", "15.0", "-"],
            ["no lag", "Tidemark, precise 0.999", "100/100", "-", "3: 30.0", "20.0", "25.5", "26.0", "11.5"],
            [
                "0.5% lagging",
                "Tidemark, precise 0.999",
                "100/100",
                "-",
                "2: 31.0",
                "21.0",
                "40.0",
                "41.0",
                "12.5",
            ],
        ],
    }
    rows = [
        line for line in goals.render({"latency": latency}).splitlines() if line.startswith("| latency (")
    ]
    assert "p99 11.5 s over the floor" in rows[0] and "| def5678 | met |" in rows[0]
    assert "p99 12.5 s over the floor" in rows[1] and "| def5678 | **NOT met** |" in rows[1]
    assert "the wait for the next 10s trigger and the batch" in rows[1]


def _soak_lines(rate: int, minutes: int) -> list[dict]:
    header = {"commit": "abc1234", "args": {"hosts": 10_000, "rate": rate, "dedup_horizon": "20m"}}
    samples = [
        {"minute": float(m), "heap_after_gc_mb": 200.0, "py_rss_mb": 500.0 + m, "batch_median_s": 7.5,
         "tables": {"events": {"log_files": 6 * m}}}
        for m in range(1, minutes + 1)
    ]  # fmt: skip
    return [header, *samples]


def test_the_soak_goal_says_what_the_run_lacked():
    """A soak shorter than 6 h, or slower than half the sustainable rate, is not met, and the row
    says which; its rate is given against the sustainable one, and the slopes are per hour."""
    goals = _goals()
    (row,) = goals.soak_rows(_soak_lines(640, 120))
    assert row[1].startswith("2.0 h at 106,667 events/s (50% of the sustainable 213,333), dedup horizon 20m")
    assert "Python RSS +60.00 MiB/h" in row[1] and "events log files +360.00 /h" in row[1]
    assert row[3] == "**NOT met**"
    assert row[4] == "not run long enough: 2.0 h of the 6 h asked"
    (slow,) = goals.soak_rows(_soak_lines(6, 120))
    assert slow[4].endswith("; at 0.5% of the sustainable rate, below the half asked")


def _soak():
    return _bench("soak")


def test_the_soak_deletes_only_the_landing_files_of_committed_batches(tmp_path):
    """--delete-consumed: the files the commit markers record (URIs, as Spark logs them), never a
    file of a batch in flight; nothing before the first commit."""
    import pandas as pd
    from deltalake import write_deltalake

    from tidemark import schemas as S
    from tidemark.checkpoint import normalize_file

    soak = _soak()
    landing = tmp_path / "landing dir"
    landing.mkdir()
    config = soak.pipeline_config(tmp_path, "soak", landing, 2)
    files = {name: landing / f"part-{name}.jsonl" for name in ("a", "b", "c", "d")}
    for path in files.values():
        path.write_text("{}\n")

    def recorded(*names: str) -> str:
        return json.dumps({"files": sorted(normalize_file(files[n].as_uri()) for n in names)})

    soak.delete_consumed(str(tmp_path / "soak.yaml"))
    assert all(path.exists() for path in files.values())  # nothing committed yet
    markers = pd.DataFrame({"batch_id": [0, 1], "source_progress": [recorded("a", "b"), recorded("c")]})
    write_deltalake(config.table_path(S.WATERMARKS), markers)
    soak.delete_consumed(str(tmp_path / "soak.yaml"))
    assert {name for name, path in files.items() if path.exists()} == {"d"}


def test_the_soak_sample_gives_each_phase_median():
    """Where the time of the sample's batches went: each phase's median, 0 for a batch that did
    not run the phase."""
    from types import SimpleNamespace

    soak = _soak()
    batches = [
        SimpleNamespace(phases={"dedup_hashes": 1.0, "write_events": 2.0}),
        SimpleNamespace(phases={"dedup_hashes": 3.0, "write_events": 4.0}),
        SimpleNamespace(phases={"dedup_hashes": 5.0}),
    ]
    assert soak.phase_medians(batches) == {"dedup_hashes": 3.0, "write_events": 2.0}
    assert soak.phase_medians([]) == {}


def _hosts_run(hosts: int, where: str, round_: int, steady: float, py_cpu: float, master="local[2]") -> dict:
    return {
        "hosts": hosts,
        "round": round_,
        "wall_s": 10.0,
        "batch_s": [9.0, steady, steady],
        "rows": 2_000_000,
        "py_cpu_s": py_cpu,
        "jvm_cpu_s": py_cpu / 2,
        "per_row_work": where,
        "master": master,
        "phase_cpu_s": {"dedup_lookup": py_cpu, "write_marker": 0.01},
    }


def test_the_hosts_bench_gives_each_way_and_grades_the_goal_on_the_drivers():
    """hosts_scale --per-row-work driver,executors: each way's Python CPU per million lines and
    the paired batch ratio against the driver way of the same round; the host-count goal is
    graded on the driver runs only (the executors' slower batches would fail it)."""
    scale, goals = _bench("hosts_scale"), _goals()
    runs = []
    for n in (1, 2, 3):
        runs += [
            _hosts_run(10_000, "driver", n, 4.0, 2.0),
            _hosts_run(10_000, "executors", n, 4.0 + n, 0.5),
            _hosts_run(1_000_000, "driver", n, 5.0, 4.0),
            _hosts_run(1_000_000, "executors", n, 20.0, 1.0),
        ]
    data = {
        "commit": "abc1234",
        "args": {"hosts": "10000,1000000", "mode": "exactly_once", "lines_per_batch": 500_000, "rounds": 3,
                 "per_row_work": "driver,executors"},
        "runs": runs,
    }  # fmt: skip
    text = scale.render(data)
    assert "| 10,000 | executors | 0.25 | 0.25-0.25 | 4,000,000 | 1.50x (1.25-1.75) |" in text
    assert "| 1,000,000 | driver | 2.00 | 2.00-2.00 | 500,000 | 1.00x (1.00-1.00) |" in text
    assert "driver JVM CPU" not in text  # local mode: the JVM's CPU holds the executors' work
    # per phase, s per M lines: 10k driver, 10k executors, 1M driver, 1M executors; write_marker
    # (0.01 s per M lines) is below what the table shows
    assert "| dedup_lookup | 1.00 | 0.25 | 2.00 | 0.50 |" in text and "write_marker" not in text
    (row,) = goals.hosts_rows(data)
    assert row[1].startswith("1.25x (1.25-1.25, 3 rounds)") and row[3] == "met"
    assert (
        row[4] == "driver CPU 2.00 s per M lines at 1,000,000 hosts (0.50 with spark.per_row_work: executors)"
    )
    for run in runs:
        run["master"] = "spark://127.0.0.1:7177"
    assert (
        "| 1,000,000 | executors | 0.50 | 0.50-0.50 | 2,000,000 | 4.00x (4.00-4.00) | 0.25 (0.25-0.25) |"
        in (scale.render(data))
    )


def test_a_results_file_names_the_code_its_run_started_on(monkeypatch):
    """The header's commit is the one checked out when the bench started (what its process
    imported); a commit to spark_jobs/ during the run marks the figures as measured on other
    code, so bench/report.py --check refuses them."""
    import argparse

    lib = _bench("benchlib")
    monkeypatch.setattr(lib, "AT_START", ("abc1234", "tree-at-start", False))
    monkeypatch.setattr(lib, "_code_state", lambda: ("def5678", "tree-at-start", False))
    header = lib.result_header("hosts_scale", argparse.Namespace())
    assert (header["commit"], header["dirty"]["spark_jobs"]) == ("abc1234", False)
    monkeypatch.setattr(lib, "_code_state", lambda: ("def5678", "tree-changed", False))
    header = lib.result_header("hosts_scale", argparse.Namespace())
    assert (header["commit"], header["dirty"]["spark_jobs"]) == ("abc1234", True)
