"""The configs in examples/ run as they are: each example's commands, read from examples/README.md
(the page users copy them from), run through the installed ``tidemark`` console script from the
repository's root, with ``TIDEMARK_HOME`` on a scratch directory and the servers the examples
start (``scripts/kafka.sh``, ``scripts/s3.sh``) on free loopback ports.

Each run must end with every generated unique event stored once: the stream's own count against
the generator's ground truth, and the reconcile step's ``--fail-below`` against the batch
recompute.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import listen_ports, suite_jvm_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TIDEMARK = Path(sys.executable).parent / "tidemark"  # the console script the package installs
STEP_TIMEOUT_S = 600


def example_commands(name: str) -> list[str]:
    """The shell lines of the ``## name`` section's sh block in examples/README.md."""
    text = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    section = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert section, f"examples/README.md has no '## {name}' section"
    block = re.search(r"```sh\n(.*?)```", section.group(1), flags=re.S)
    assert block, f"examples/README.md's {name} section has no sh block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


class Servers:
    """What the examples' ``scripts/...`` lines start, on free ports the configs are pointed at
    through the environment variables they interpolate."""

    def __init__(self, kafka, tmp: Path) -> None:
        self.kafka = kafka
        self.tmp = tmp
        self.s3_env: dict[str, str] | None = None

    def run(self, line: str, env: dict[str, str]) -> None:
        script, action = shlex.split(line)
        if script == "scripts/kafka.sh":
            env["TIDEMARK_KAFKA_BOOTSTRAP"] = self.kafka().bootstrap  # the session's broker
        elif script == "scripts/s3.sh":
            if self.s3_env is None:
                [port] = listen_ports(1)
                self.s3_env = {
                    **os.environ,
                    "TIDEMARK_S3_DIR": str(self.tmp / "s3"),
                    "TIDEMARK_S3_PORT": str(port),
                }
            subprocess.run([str(REPO / script), action], env=self.s3_env, check=True, capture_output=True)
            env["TIDEMARK_S3_ENDPOINT"] = f"http://127.0.0.1:{self.s3_env['TIDEMARK_S3_PORT']}"
        else:
            raise AssertionError(f"the test does not know how to run {line!r}")

    def stop(self) -> None:
        if self.s3_env is not None:
            subprocess.run([str(REPO / "scripts/s3.sh"), "stop"], env=self.s3_env, capture_output=True)


def run_example(name: str, servers: Servers, home: Path) -> dict[str, str]:
    """Run the example's commands in order; each must exit 0. Returns each command's output."""
    # A user's shell: none of the suite's TIDEMARK_ or AWS_ settings but its JVM options
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_", "AWS_"))} | {
        **suite_jvm_options(),
        "TIDEMARK_HOME": str(home),
        "TIDEMARK_SPARK_LOG_LEVEL": "ERROR",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    outputs: dict[str, str] = {}
    for line in example_commands(name):
        if line.startswith("scripts/"):
            servers.run(line, env)
            continue
        if line.startswith("export "):
            for assignment in shlex.split(line)[1:]:
                key, _, value = assignment.partition("=")
                env[key] = value
            continue
        argv = shlex.split(line)
        assert argv[0] == "tidemark", f"examples/README.md {name}: unexpected command {line!r}"
        done = subprocess.run(
            [str(TIDEMARK), *argv[1:]],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
        )
        assert done.returncode == 0, (
            f"{name}: `{line}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        outputs[line] = done.stdout
    return outputs


def _figure(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    assert match, f"no {pattern!r} in:\n{text[-2000:]}"
    return int(match.group(1).replace(",", ""))


def stored_once(outputs: dict[str, str], stream_config: str) -> None:
    """The generator's unique events, all stored by the stream's runs of ``stream_config``."""
    generated = next(out for line, out in outputs.items() if line.startswith("tidemark generate"))
    unique = _figure(r"([\d,]+) unique events", generated)
    streamed = [
        out for line, out in outputs.items() if line.startswith(f"tidemark stream --config {stream_config}")
    ]
    stored = sum(_figure(r"stopped after \d+ batches, ([\d,]+) events", out) for out in streamed)
    assert stored == unique > 0


@pytest.fixture
def servers(request, tmp_path):
    made = Servers(lambda: request.getfixturevalue("kafka"), tmp_path)
    yield made
    made.stop()


def test_every_example_has_its_commands_and_its_configs_load():
    from tidemark.config import load_config

    configs = sorted(EXAMPLES.rglob("*.yaml"))
    assert {p.parent.name for p in configs} == {"files", "kafka", "s3", "chained"}
    for name in ("files", "kafka", "s3", "chained"):
        lines = example_commands(name)
        for config in (p for p in configs if p.parent.name == name):
            assert any(str(config.relative_to(REPO)) in line for line in lines), f"{config} is never run"
    env = {"TIDEMARK_KAFKA_BOOTSTRAP": "127.0.0.1:1", "TIDEMARK_S3_ENDPOINT": "http://127.0.0.1:1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for config in configs:
            assert load_config(config).pipeline.startswith("example-")
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def test_files_example_runs_as_written(servers, tmp_path):
    outputs = run_example("files", servers, tmp_path)
    stored_once(outputs, "examples/files/pipeline.yaml")
    assert (tmp_path / "var/examples/warehouse/example-files/windows/_delta_log").is_dir()
    report = next(out for line, out in outputs.items() if line.startswith("tidemark report"))
    assert "reconciliation report:" in report


def test_kafka_example_runs_as_written(servers, tmp_path):
    outputs = run_example("kafka", servers, tmp_path)
    stored_once(outputs, "examples/kafka/pipeline.yaml")


def test_s3_example_runs_as_written(servers, tmp_path):
    outputs = run_example("s3", servers, tmp_path)
    stored_once(outputs, "examples/s3/pipeline.yaml")
    assert not (tmp_path / "var").exists()  # every location is on the object store


def test_chained_example_runs_as_written(servers, tmp_path):
    outputs = run_example("chained", servers, tmp_path)
    stored_once(outputs, "examples/chained/sessions.yaml")
    upstream = sum(
        _figure(r"stopped after \d+ batches, ([\d,]+) events", out)
        for line, out in outputs.items()
        if "sessions.yaml --once" in line
    )
    downstream = _figure(
        r"stopped after \d+ batches, ([\d,]+) events",
        next(out for line, out in outputs.items() if "rollup.yaml --once" in line),
    )
    assert downstream == upstream
