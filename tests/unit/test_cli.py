"""The `tidemark` command line, for what runs without a JVM."""

from __future__ import annotations

import pyarrow as pa
import yaml
from deltalake import write_deltalake
from helpers import write_config

from tidemark.cli import main


def test_maintain_dry_run_lists_each_table_and_what_it_gets_without_spark(tmp_path, capsys):
    config = write_config(tmp_path, name="clicks")
    for table in ("events", "watermarks", "_state/open_windows", "_scratch/other"):
        write_deltalake(config.table_path(table), pa.table({"a": [1]}))
    assert main(["maintain", "--config", str(tmp_path / "clicks.yaml"), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[clicks] watermarks: compact",
        "[clicks] events: zorder",
        "[clicks] _state/open_windows: state",
        "[clicks] _scratch/other: vacuum only",
    ]


def test_maintain_refuses_a_vacuum_retention_below_a_week_in_one_line(tmp_path, capsys):
    path = tmp_path / "clicks.yaml"
    data = {
        "pipeline": "clicks",
        "source": {"path": str(tmp_path / "landing")},
        "warehouse": str(tmp_path / "warehouse"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "maintenance": {"vacuum_retention": "2d"},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["maintain", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"tidemark: error: config {path}: maintenance.vacuum_retention: 2d is below")
