"""The expected-host list (the naming service): which hosts the precise watermark counts.

Without a list, the population is every host that has sent something. With one
(``watermark.hosts_file``), a host on the list that has sent nothing counts as lagging, and a
host not on it is ignored. Pure: no Spark.
"""

from __future__ import annotations

import os

from tidemark.config import ConfigError


def read_hosts_file(path: str) -> frozenset[str]:
    """Expected hosts, one per line; blank lines and '#' comments are ignored."""
    with open(path, encoding="utf-8") as handle:
        return frozenset(line.split("#", 1)[0].strip() for line in handle if line.split("#", 1)[0].strip())


class ExpectedHosts:
    """The expected-host list, re-read when the file changes (a stream runs for weeks)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._mtime: int | None = None
        self._hosts: frozenset[str] | None = None

    def current(self) -> frozenset[str] | None:
        if self.path is None:
            return None
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise ConfigError(f"watermark.hosts_file {self.path}: file not found") from None
        if mtime != self._mtime:
            self._hosts, self._mtime = read_hosts_file(self.path), mtime
        return self._hosts
