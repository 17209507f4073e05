"""The demo's pieces (tidemark.demo): its pipeline file, its object-storage arguments and its
alignment line. (run_demo itself is run end to end by the examples and cluster tests.)"""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import yaml
from helpers import small_scenario

from tidemark.config import load_config
from tidemark.demo import _alignment_line, _generate, _storage_block, write_demo_config


def test_the_demo_config_puts_landing_warehouse_and_checkpoint_under_the_workdir(tmp_path):
    workdir = tmp_path / "new" / "demo"  # created
    path = write_demo_config(workdir, files_per_batch=3)
    assert path == workdir / "demo.yaml"
    config = load_config(path)
    assert config.pipeline == "demo"
    assert (config.source.kind, config.source.path) == ("files", f"{workdir}/landing")
    assert config.source.max_files_per_trigger == 3
    assert config.checkpoint == f"{workdir}/checkpoints/demo"
    assert config.warehouse == f"{workdir}/warehouse"
    assert (config.window, config.allowed_lateness) == (60_000, 3_600_000)
    assert config.watermark.precision == 0.999 and config.dedup_horizon == 86_400_000
    assert "storage" not in yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_demo_on_object_storage_keeps_only_its_file_in_the_workdir(tmp_path):
    block = {"endpoint": "http://127.0.0.1:9000", "path_style": True}
    path = write_demo_config(tmp_path, 2, location="s3a://bucket/demo/", storage=block)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["source"]["path"] == "s3a://bucket/demo/landing"  # the trailing slash dropped
    assert data["warehouse"] == "s3a://bucket/demo/warehouse"
    assert data["checkpoint"] == "s3a://bucket/demo/checkpoints/demo"
    assert data["storage"] == block


def test_the_storage_block_takes_only_the_s3_options_given():
    assert _storage_block(Namespace()) == {}
    assert _storage_block(Namespace(s3_endpoint=None, s3_path_style=False)) == {}
    assert _storage_block(Namespace(s3_endpoint="http://minio:9000", s3_path_style=True)) == {
        "endpoint": "http://minio:9000",
        "path_style": True,
    }


def test_a_local_landing_is_generated_in_place(tmp_path):
    landing = tmp_path / "landing"
    truth = _generate(small_scenario(minutes=2), str(landing), tmp_path, keep=False, echo=print)
    assert truth.files == len(list(landing.glob("part-*.jsonl"))) > 0
    assert not (tmp_path / "landing" / "landing").exists()


def _window(ontime, revisions):
    return SimpleNamespace(ontime_alignment=ontime, revisions=revisions)


def test_the_alignment_line_counts_on_time_windows_at_target_and_the_final_result():
    summary = SimpleNamespace(
        worst_ontime_alignment=0.9, worst_alignment=1.0, aligned=4, late_folded=12, late_events=3
    )
    report = SimpleNamespace(
        target=0.99,
        closed=[_window(1.0, 0), _window(0.99, 1), _window(0.9, 2), _window(None, 0)],
        summary=lambda: summary,
    )
    assert _alignment_line(report, 3_600_000) == (
        "alignment on-time (first result, when each window closed): worst 0.9, 50.00% of windows "
        "at target; final (latest revision, allowed lateness 1h): worst 1.0, 100.00% at target; "
        "12 late records folded into 3 revisions, 3 beyond the allowed lateness"
    )


def test_the_alignment_line_with_no_closed_window_says_so():
    summary = SimpleNamespace(
        worst_ontime_alignment=None, worst_alignment=None, aligned=0, late_folded=0, late_events=0
    )
    line = _alignment_line(SimpleNamespace(target=0.99, closed=[], summary=lambda: summary), 60_000)
    assert "worst None, - of windows at target" in line and "worst None, - at target" in line
