"""What a config file may say, and how it is told it said something wrong: durations need a unit
(short, Spark's or ISO-8601 form), a key belongs where the models put it, every error names
file:line:column, and ``${VAR}`` fills in what changes between environments."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tidemark import config_schema, config_types
from tidemark.config import ConfigError, PipelineConfig, ValidationConfig, load_config, parse_config
from tidemark.timeutil import parse_duration_ms

# lines 1-6; what a test appends starts on line 7
BASE_TEXT = "pipeline: clicks\nsource:\n  kind: files\n  path: landing\nwarehouse: wh\ncheckpoint: ck\n"
BASE = {
    "pipeline": "clicks",
    "source": {"kind": "files", "path": "landing"},
    "warehouse": "wh",
    "checkpoint": "ck",
}
REPO = Path(__file__).resolve().parents[2]


def _file(tmp_path: Path, text: str, name: str = "clicks.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> str:
    """The ConfigError's message without its ``config <path>`` prefix; always one line."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith(f"config {path}"), message
    return message.removeprefix(f"config {path}")


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "number"),
    [
        ("window: 90\n", ":7:9: window", "90"),
        ("window:\n  size: 90\n", ":8:9: window.size", "90"),
        ("window:\n  size: 1m\n  allowed_lateness: 120\n", ":9:21: window.allowed_lateness", "120"),
        ("trigger_interval: 10\n", ":7:19: trigger_interval", "10"),
        ("watermark:\n  stall_after: 2.5\n", ":8:16: watermark.stall_after", "2.5"),
        ("maintenance:\n  vacuum_retention: '200'\n", ":8:21: maintenance.vacuum_retention", "200"),
    ],
)
def test_a_bare_number_for_a_duration_is_an_error_naming_field_and_units(tmp_path, text, where, number):
    message = _error(_file(tmp_path, BASE_TEXT + text))
    n = number.replace(".", r"\.")
    expected = (
        rf"{where}: {n} is a bare number; write it with a unit: {n}ms, {n}s, {n}m, '{n} seconds' or PT{n}S"
    )
    assert re.fullmatch(expected, message), message


def test_zero_needs_no_unit_and_python_callers_keep_int_milliseconds(tmp_path):
    config = load_config(_file(tmp_path, BASE_TEXT + "window:\n  size: 1m\n  allowed_lateness: 0\n"))
    assert config.allowed_lateness == 0
    # built in Python (no file): an int is milliseconds, as before
    assert parse_config({**BASE, "window": 90_000, "trigger_interval": 10}).window == 90_000
    assert PipelineConfig.model_validate({**BASE, "window": 90_000}).window == 90_000
    assert PipelineConfig(**BASE, trigger_interval=250).trigger_interval == 250  # type: ignore[arg-type]
    assert ValidationConfig(max_clock_skew=1_000).max_clock_skew == 1_000  # type: ignore[arg-type]
    assert config.model_copy(update={"window": 30_000}).window == 30_000
    # the model's own top-level field stays open to Python (a file writes window.allowed_lateness)
    assert parse_config({**BASE, "allowed_lateness": 0}).allowed_lateness == 0
    assert parse_duration_ms(7) == 7


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1m", 60_000),
        ("10s", 10_000),
        ("500ms", 500),
        ("1 minute", 60_000),
        ("10 seconds", 10_000),
        ("1 second", 1_000),
        ("2 hours", 7_200_000),
        ("500 milliseconds", 500),
        ("1 millisecond", 1),
        ("1 day", 86_400_000),
        ("3 Days", 3 * 86_400_000),
        ("interval 7 days", 7 * 86_400_000),
        ("1 hour 30 minutes", 5_400_000),
        ("PT1M", 60_000),
        ("PT0.5S", 500),
        ("P1D", 86_400_000),
        ("PT1H30M", 5_400_000),
        ("P1DT12H", 36 * 3_600_000),
        ("pt10s", 10_000),
    ],
)
def test_spark_and_iso_8601_duration_forms_are_accepted(tmp_path, text, ms):
    assert parse_duration_ms(text) == ms
    assert re.fullmatch(config_types.DURATION_PATTERN, text)  # the JSON Schema's pattern agrees
    config = load_config(_file(tmp_path, BASE_TEXT + f"dedup_horizon: '{text}'\n"))
    assert config.dedup_horizon == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("PT0.0001S", r"'PT0\.0001S' is not a whole number of milliseconds"),
        ("P1M", r"'P1M': months and years have no fixed length; write days \(P30D\)"),
        ("1 fortnight", r"not a duration: '1 fortnight' \(write 1m, '1 minute' or PT1M"),
        ("PT", r"not a duration: 'PT'"),
        ("-1 minute", r"not a duration: '-1 minute'"),
    ],
)
def test_durations_that_are_not_exact_or_not_durations_are_refused(tmp_path, text, why):
    with pytest.raises(ValueError, match=why):
        parse_duration_ms(text)
    message = _error(_file(tmp_path, BASE_TEXT + f"trigger_interval: '{text}'\n"))
    assert re.match(rf":7:19: trigger_interval: .*{why}", message), message


# -- keys in the wrong place -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "allowed_lateness: 2h\n",
            r":7:1: allowed_lateness: not a top-level key; did you mean window\.allowed_lateness\?",
        ),
        ("precision: 0.9\n", r":7:1: precision: not a top-level key; did you mean watermark\.precision\?"),
        ("size: 1m\n", r":7:1: size: not a top-level key; did you mean window\.size\?"),
        (
            "watermark:\n  trigger_interval: 1s\n",
            r":8:3: watermark\.trigger_interval: not a key of watermark; did you mean trigger_interval\?",
        ),
        (
            "spark:\n  master: local\n  topic: t\n",
            r":9:3: spark\.topic: not a key of spark; did you mean source\.topic\?",
        ),
        (
            "watermark:\n  precison: 0.9\n",
            r":8:3: watermark\.precison: unknown key; did you mean precision\?",
        ),
        ("colour: blue\n", r":7:1: colour: unknown key"),
        (
            "window:\n  lateness: 1h\n",
            r":8:3: window\.lateness: unknown key \(the window block takes size, allowed_lateness\)",
        ),
    ],
)
def test_an_unknown_or_misplaced_key_is_an_error_suggesting_its_place(tmp_path, text, expected):
    message = _error(_file(tmp_path, BASE_TEXT + text))
    assert re.fullmatch(expected, message), message


def test_a_key_given_twice_is_an_error(tmp_path):
    message = _error(_file(tmp_path, BASE_TEXT + "window: 1m\nwindow: 5m\n"))
    assert re.fullmatch(r":8:1: window: given twice \(first on line 7\)", message), message


# -- where: file:line:column -------------------------------------------------------------------


def test_a_yaml_syntax_error_names_line_and_column(tmp_path):
    message = _error(_file(tmp_path, "pipeline: clicks\nsource: [unclosed\nwarehouse: wh\n"))
    assert re.fullmatch(r":\d+:\d+: not valid YAML: .+", message), message
    message = _error(_file(tmp_path, "pipeline: clicks\n  source: x\n", "indent.yaml"))
    assert re.fullmatch(r":2:9: not valid YAML: mapping values are not allowed here", message), message


def test_validation_errors_name_the_line_and_column_of_the_value(tmp_path):
    text = BASE_TEXT + "watermark:\n  precision: 1.5\n"
    assert (
        _error(_file(tmp_path, text)) == ":8:14: watermark.precision: Input should be less than or equal to 1"
    )
    # a missing key: where the mapping that lacks it starts
    message = _error(
        _file(tmp_path, "pipeline: clicks\nsource:\n  kind: kafka\nwarehouse: wh\ncheckpoint: ck\n")
    )
    assert message == ":3:3: source: bootstrap_servers and topic: required when source.kind is kafka"
    message = _error(_file(tmp_path, "pipeline: clicks\nsource: {path: p}\n"))
    assert message == ":1:1: warehouse: required key is missing; 1:1: checkpoint: required key is missing"
    # a list item: its own line
    message = _error(_file(tmp_path, BASE_TEXT + "alerts:\n  email_to:\n    - a@b.c\n    - [x]\n"))
    assert message.startswith(":10:7: alerts.email_to.1: Input should be a valid string"), message


def test_an_empty_file_and_a_directory_each_have_their_own_message(tmp_path):
    empty = (
        ": the file is empty (a pipeline config is a mapping: pipeline, source, warehouse, checkpoint, ...)"
    )
    assert _error(_file(tmp_path, "")) == empty
    assert _error(_file(tmp_path, "# only a comment\n", "c.yaml")).startswith(": the file is empty")
    folder = tmp_path / "pipelines.yaml"
    folder.mkdir()
    assert _error(folder) == ": is a directory, not a config file"
    assert _error(tmp_path / "nope.yaml") == ": file not found"
    assert (
        _error(_file(tmp_path, "- a\n- b\n", "list.yaml"))
        == ":1:1: expected a mapping of keys (pipeline: ..., source: ...), got a list"
    )


# -- ${VAR} ------------------------------------------------------------------------------------


def test_environment_variables_fill_in_string_values(tmp_path, monkeypatch):
    monkeypatch.setenv("TM_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("TM_WINDOW", "5m")
    monkeypatch.delenv("TM_UNSET", raising=False)
    text = (
        "pipeline: clicks\nsource:\n  kind: files\n  path: ${TM_ROOT}/landing\n"
        "warehouse: ${TM_ROOT}/wh\ncheckpoint: '${TM_UNSET:-/ck}/$${literal}'\nwindow: ${TM_WINDOW}\n"
        "alerts:\n  webhook_endpoint: ${TM_UNSET:-}\n"
    )
    config = load_config(_file(tmp_path, text))
    assert config.source.path == str(tmp_path / "data" / "landing")
    assert config.warehouse == str(tmp_path / "data" / "wh")
    assert config.checkpoint == "/ck/${literal}"
    assert config.window == 300_000 and config.alerts.webhook_endpoint == ""


def test_an_unset_variable_without_default_is_an_error_naming_it_and_its_place(tmp_path, monkeypatch):
    monkeypatch.delenv("TM_UNSET", raising=False)
    message = _error(_file(tmp_path, BASE_TEXT + "alerts:\n  webhook_endpoint: x/${TM_UNSET}/y\n"))
    assert message == (
        ":8:21: alerts.webhook_endpoint: environment variable TM_UNSET is not set "
        "(give a default: ${TM_UNSET:-value})"
    )
    message = _error(_file(tmp_path, BASE_TEXT + "alerts:\n  webhook_endpoint: ${not a name}\n"))
    assert message.startswith(
        ":8:21: alerts.webhook_endpoint: '${not a name}' is not ${VAR} or ${VAR:-default}"
    )


def test_a_number_from_the_environment_still_needs_a_unit(tmp_path, monkeypatch):
    monkeypatch.setenv("TM_TRIGGER", "10")
    message = _error(_file(tmp_path, BASE_TEXT + "trigger_interval: ${TM_TRIGGER}\n"))
    assert message.startswith(":7:19: trigger_interval: 10 is a bare number"), message


# -- JSON Schema -------------------------------------------------------------------------------


def _schema_text() -> str:
    return json.dumps(config_schema.config_json_schema(), indent=2) + "\n"


def test_the_committed_json_schema_is_the_generated_one():
    committed = (REPO / "docs" / "pipeline.schema.json").read_text(encoding="utf-8")
    assert committed == _schema_text(), (
        "docs/pipeline.schema.json is stale: tidemark schema > docs/pipeline.schema.json"
    )


def test_tidemark_schema_prints_it(capsys):
    from tidemark.cli import main

    assert main(["schema"]) == 0
    assert capsys.readouterr().out == _schema_text()


def test_the_schema_documents_durations_as_strings_and_forbids_unknown_keys():
    schema = config_schema.config_json_schema()
    props = schema["properties"]
    assert "allowed_lateness" not in props and schema["additionalProperties"] is False
    trigger = props["trigger_interval"]
    assert (
        "string" in json.dumps(trigger)
        and "PT1M" in trigger["description"]
        and "1h" in trigger["description"]
    )
    assert "integer" not in json.dumps(trigger).replace('"const": 0', "")


def test_example_configs_validate_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = config_schema.config_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = sorted([*(REPO / "examples").glob("*/*.yaml"), *(REPO / "docker" / "pipelines").glob("*.yaml")])
    assert files
    for path in files:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, (path, errors)
        load_config(path)
    data = {**BASE, "window": {"size": "1 minute", "allowed_lateness": 0}, "trigger_interval": "PT10S"}
    assert not list(validator.iter_errors(data))
    for bad in (
        {**BASE, "window": 90},
        {**BASE, "allowed_lateness": "2h"},
        {**BASE, "watermark": {"precison": 1}},
    ):
        assert list(validator.iter_errors(bad)), bad


def test_environment_is_not_needed_for_python_callers():
    # parse_config takes a mapping already read: no ${VAR} substitution there
    config = parse_config({**BASE, "checkpoint": "/ck/${NOT_SUBSTITUTED}"})
    assert config.checkpoint == "/ck/${NOT_SUBSTITUTED}"
    assert os.environ.get("NOT_SUBSTITUTED") is None


def test_a_block_check_naming_a_key_points_at_that_key(tmp_path):
    message = _error(_file(tmp_path, BASE_TEXT + "storage:\n  region: eu\n  secret_key: x\n"))
    assert message.startswith(":9:3: storage: secret_key: credentials are never read from the config file")
    # a union value (spark.conf) still gets its error
    message = _error(_file(tmp_path, BASE_TEXT + "spark:\n  conf:\n    spark.x: [1, 2]\n"))
    assert message.startswith(":9:14: spark.conf.spark.x: "), message
