"""One error hierarchy: every error a person can act on is a TidemarkError with its exit code."""

from __future__ import annotations

import argparse

import pytest

from tidemark import cli
from tidemark.errors import (
    ConfigError,
    ExitCode,
    LeaseError,
    NotRunError,
    SetupError,
    TidemarkError,
    UsageError,
)


def test_the_exit_codes_keep_their_numbers():
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0,
        "USAGE": 2,
        "MISALIGNED": 3,
        "STALLED": 4,
        "QUALITY": 5,
        "LEASE": 6,
        "NOT_RUN": 7,
    }
    assert (cli.EXIT_USAGE, cli.EXIT_MISALIGNED, cli.EXIT_STALLED) == (2, 3, 4)
    assert (cli.EXIT_QUALITY, cli.EXIT_LEASE, cli.EXIT_NOT_RUN) == (5, 6, 7)


def test_every_known_error_is_a_tidemark_error_with_its_exit_code_and_line():
    from tidemark.identity import IdentityError
    from tidemark.kafka_access import KafkaAccessError
    from tidemark.lease import Fenced, LeaseHeld
    from tidemark.object_store import StorageError
    from tidemark.sources import SourceRangeError

    expected = {
        ConfigError: (ExitCode.USAGE, "tidemark: error: it"),
        UsageError: (ExitCode.USAGE, "tidemark: error: it"),
        SetupError: (ExitCode.USAGE, "tidemark: error: it"),
        StorageError: (ExitCode.USAGE, "tidemark: error: it"),
        KafkaAccessError: (ExitCode.USAGE, "tidemark: error: it"),
        IdentityError: (ExitCode.USAGE, "tidemark: error: it"),
        SourceRangeError: (ExitCode.USAGE, "tidemark: error: it"),
        LeaseHeld: (ExitCode.LEASE, "tidemark: error: it"),
        Fenced: (ExitCode.LEASE, "tidemark: error: it"),
        NotRunError: (ExitCode.NOT_RUN, "tidemark: it"),
    }
    for kind, (code, line) in expected.items():
        error = kind("it")
        assert isinstance(error, TidemarkError), kind
        assert (error.exit_code, error.one_line()) == (code, line), kind
    # the built-in bases callers catch stay
    assert issubclass(ConfigError, ValueError) and issubclass(SetupError, RuntimeError)
    assert issubclass(LeaseError, RuntimeError)


def _parser_running(handler):
    parser = argparse.ArgumentParser(prog="tidemark")
    parser.set_defaults(func=handler)
    return parser


def test_the_cli_answers_a_tidemark_error_in_one_line_and_a_bug_with_its_traceback(monkeypatch, capsys):
    def refused(args):
        raise LeaseHeld("pipeline clicks: another stream holds the lease")

    def bug(args):
        raise ValueError("a bug")

    from tidemark.lease import LeaseHeld

    monkeypatch.setattr(cli, "build_parser", lambda: _parser_running(refused))
    assert cli.main([]) == ExitCode.LEASE
    assert capsys.readouterr().err == "tidemark: error: pipeline clicks: another stream holds the lease\n"
    monkeypatch.setattr(cli, "build_parser", lambda: _parser_running(bug))
    with pytest.raises(ValueError, match="a bug"):
        cli.main([])


def test_a_range_that_holds_no_instant_is_named_by_the_domain_and_by_the_cli():
    from tidemark.cli.common import check_options_range
    from tidemark.timeutil import check_range

    check_range(None, 5)
    check_range(1, 2)
    with pytest.raises(UsageError, match=r"^end \(1970-01-01T00:00:00.001Z\) must be after start"):
        check_range(2, 1)
    cli_line = r"^report: --end \(1970-01-01T00:00:00.001Z\) must be after --start"
    with pytest.raises(UsageError, match=cli_line):
        check_options_range("report", 2, 1)


def test_an_unreadable_airflow_connection_is_one_line_naming_the_field_and_the_connection(monkeypatch):
    from tidemark import connections
    from tidemark.connections import connection_for
    from tidemark.errors import SetupError

    # outside Airflow (another test in this process may have installed Airflow's own reader)
    monkeypatch.setattr(connections, "_connection_reader", None)
    monkeypatch.delenv("AIRFLOW_CONN_TM_ABSENT", raising=False)
    with pytest.raises(SetupError) as caught:
        connection_for("tm_absent", "storage.airflow_connection", SetupError)
    assert str(caught.value) == (
        "storage.airflow_connection: Airflow connection 'tm_absent' could not be read "
        "(LookupError: AIRFLOW_CONN_TM_ABSENT is not set and this is not an Airflow process)"
    )
    monkeypatch.setenv("AIRFLOW_CONN_TM_ABSENT", '{"login": "u", "password": "p"}')
    assert connection_for("tm_absent", "storage.airflow_connection", SetupError)["login"] == "u"
