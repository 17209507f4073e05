"""The project's own Kafka broker (scripts/kafka.sh) as tests start it; the session fixture
``kafka`` (tests/conftest.py) and the secured broker (tests/kafka_secure.py) build on it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class KafkaBroker:
    """The project's own single-broker KRaft Kafka (scripts/kafka.sh) on free loopback ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.script = Path(__file__).resolve().parents[1] / "scripts" / "kafka.sh"
        self._ports()

    def _ports(self) -> None:
        from helpers import listen_ports

        port, controller = listen_ports(2)
        self.env = {
            **os.environ,
            "TIDEMARK_KAFKA_DIR": str(self.directory),
            "TIDEMARK_KAFKA_PORT": str(port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(controller),
            # idle most of the run, beside the workers: the serial collector and C1 only (its
            # idle CPU, 60 s: 1.96 -> 1.62 s; with the script's one-node idle setting, 1.03 s)
            "TIDEMARK_KAFKA_JVM_OPTIONS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        }
        self.bootstrap = f"127.0.0.1:{port}"

    def _run(self, action: str) -> None:
        import subprocess

        done = subprocess.run(
            [str(self.script), action], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            log = self.directory / "broker.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"scripts/kafka.sh {action} failed: {done.stderr.strip()}\n{tail}")

    def start(self) -> None:
        self._run("start")

    def first_start(self, attempts: int = 3) -> None:
        """Start it, on new ports and an empty directory when a port was taken between the check
        and the broker's bind (a later restart keeps its ports: clients know them)."""
        for attempt in range(attempts):
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.stop()  # a broker that never opened its port, if still alive
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory.mkdir()
                self._ports()

    def stop(self) -> None:
        self._run("stop")
