"""The `tidemark` command line, for what runs without a JVM."""

from __future__ import annotations

import re

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
    where = rf"tidemark: error: config {re.escape(str(path))}:\d+:\d+: "  # file:line:column
    assert re.match(where + r"maintenance\.vacuum_retention: 2d is below", err)


# -- a pipeline that never ran: one answer from every command -------------------------------------

NEVER_RAN = [
    ["watermark"],
    ["watermark", "--fail-on-stall"],
    ["watermark", "--json"],
    ["completeness"],
    ["completeness", "--json", "--hour", "2025-11-22T10:00:00Z"],
    ["report"],
    ["report", "--validate"],
    ["validate"],
    ["validate", "--spark"],
    ["maintain", "--dry-run"],
    ["maintain"],
    ["reconcile"],
    ["reconcile", "--start", "2025-11-22T10:00:00Z", "--end", "2025-11-22T11:00:00Z"],
]


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_pipeline_that_never_ran_gets_one_answer_from_every_command(tmp_path, capsys, monkeypatch):
    from tidemark import cli, sparkenv

    def no_jvm(*args, **kwargs):
        raise AssertionError("a Spark session was asked for")

    monkeypatch.setattr(sparkenv, "session_for", no_jvm)
    config = write_config(tmp_path, name="clicks")
    before = _files(tmp_path)
    expected = f"tidemark: pipeline clicks has not run yet: no tables under {config.tables_root}"
    for command in NEVER_RAN:
        code = main([*command, "--config", str(tmp_path / "clicks.yaml")])
        out, err = capsys.readouterr()
        assert (code, out, err) == (7, "", expected + "\n"), command
        assert _files(tmp_path) == before, command  # no GX folder, no report, no table
    assert cli.EXIT_NOT_RUN == 7
    assert "7 the pipeline has not run yet" in " ".join(cli.build_parser().format_help().split())


def test_a_pipeline_with_a_table_has_run(tmp_path, capsys):
    config = write_config(tmp_path, name="clicks")
    write_deltalake(config.table_path("events"), pa.table({"a": [1]}))
    assert main(["maintain", "--config", str(tmp_path / "clicks.yaml"), "--dry-run"]) == 0
    assert capsys.readouterr().out == "[clicks] events: zorder\n"


# -- object storage that cannot be read: one line, exit 2 ---------------------------------------------

READERS = [
    ["watermark"],
    ["completeness"],
    ["report"],
    ["validate"],
    ["maintain", "--dry-run"],
    ["maintain"],
    ["reconcile"],
]


def _no_aws_environment(monkeypatch, tmp_path):
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata: no wait
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


def _s3_config(tmp_path, bucket: str, **storage_block):
    return write_config(
        tmp_path,
        name="clicks",
        source={"kind": "files", "path": f"s3a://{bucket}/landing"},
        warehouse=f"s3a://{bucket}/warehouse",
        checkpoint=f"s3a://{bucket}/checkpoints/clicks",
        storage={"path_style": True, **storage_block},
    )


def _every_reader_says(tmp_path, capsys, monkeypatch, expected: str) -> None:
    from tidemark import sparkenv

    def no_jvm(*args, **kwargs):
        raise AssertionError("a Spark session was asked for")

    monkeypatch.setattr(sparkenv, "session_for", no_jvm)
    for command in READERS:
        code = main([*command, "--config", str(tmp_path / "clicks.yaml")])
        out, err = capsys.readouterr()
        assert (code, out, err) == (2, "", f"tidemark: error: {expected}\n"), command


def test_an_s3_endpoint_that_refuses_connections_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    from helpers import listen_ports

    _no_aws_environment(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "tidemark-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "tidemark-test-secret")
    [port] = listen_ports(1)  # free, and nothing listens on it
    _s3_config(tmp_path, "closed-port", endpoint=f"http://127.0.0.1:{port}")
    _every_reader_says(
        tmp_path,
        capsys,
        monkeypatch,
        "cannot read s3a://closed-port/warehouse/clicks/watermarks: connection refused by "
        f"http://127.0.0.1:{port} (storage.endpoint)",
    )


def test_s3_without_credentials_is_one_line_saying_so(tmp_path, capsys, monkeypatch):
    _no_aws_environment(monkeypatch, tmp_path)
    _s3_config(tmp_path, "no-credentials")
    _every_reader_says(
        tmp_path,
        capsys,
        monkeypatch,
        "cannot read s3a://no-credentials/warehouse/clicks/watermarks: no S3 credentials found "
        "(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or storage.airflow_connection)",
    )


def test_the_installed_command_prints_no_rust_warnings_before_the_line(tmp_path):
    """The AWS SDK in delta-rs logs WARN lines when its credential chain finds nothing; the
    installed `tidemark` silences them (RUST_LOG before deltalake is imported). The instance-
    metadata endpoint is a closed local port: refused at once, wherever the test runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from helpers import listen_ports

    [port] = listen_ports(1)
    _s3_config(tmp_path, "no-credentials")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RUST_LOG"}
    env.update(
        AWS_EC2_METADATA_SERVICE_ENDPOINT=f"http://127.0.0.1:{port}",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
    )
    tidemark = Path(sys.executable).with_name("tidemark")
    done = subprocess.run(
        [str(tidemark), "watermark", "--config", str(tmp_path / "clicks.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "tidemark: error: cannot read s3a://no-credentials/warehouse/clicks/watermarks: no S3 "
        "credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or storage.airflow_connection)"
    ]


# -- help and version -----------------------------------------------------------------------------------


def test_the_installed_command_prints_its_version():
    import subprocess
    import sys
    from importlib.metadata import version
    from pathlib import Path

    tidemark = Path(sys.executable).with_name("tidemark")
    done = subprocess.run([str(tidemark), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"tidemark {version('tidemark')}\n", "")


def test_help_texts_read_as_written(capsys):
    import pytest

    for command in (["demo", "--help"], ["generate", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
    text = capsys.readouterr().out
    assert "0.05% lagging" in " ".join(text.split()) and "%%" not in text
    assert "\nwhere:\n" not in text and "\noutput and pacing:\n" in text
