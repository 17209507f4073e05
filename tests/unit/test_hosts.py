"""The expected-host list (tidemark.hosts): the file's format, and re-reading it when it changes."""

from __future__ import annotations

import os

import pytest

from tidemark.config import ConfigError
from tidemark.hosts import ExpectedHosts, read_hosts_file


def test_one_host_a_line_ignoring_blanks_comments_and_surrounding_spaces(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text(
        "# the expected hosts\n\nhost-a\n   host-b   \nhost-c # rack 4\n\t\n#host-d\nhost-a\n",
        encoding="utf-8",
    )
    assert read_hosts_file(str(path)) == frozenset({"host-a", "host-b", "host-c"})


def test_a_file_of_only_comments_expects_no_host(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("# none yet\n\n", encoding="utf-8")
    assert read_hosts_file(str(path)) == frozenset()


def test_no_file_configured_means_every_host_counts():
    assert ExpectedHosts(None).current() is None


def test_the_list_is_read_again_when_the_file_changes_and_not_before(tmp_path, monkeypatch):
    path = tmp_path / "hosts.txt"
    path.write_text("a\nb\n", encoding="utf-8")
    reads = []
    import tidemark.hosts as hosts_module

    real = hosts_module.read_hosts_file
    monkeypatch.setattr(hosts_module, "read_hosts_file", lambda p: reads.append(p) or real(p))
    expected = ExpectedHosts(str(path))
    assert expected.current() == {"a", "b"}
    assert expected.current() == {"a", "b"}
    assert len(reads) == 1  # unchanged file: not read again
    path.write_text("a\nb\nc\n", encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a later mtime, surely
    assert expected.current() == {"a", "b", "c"}
    assert len(reads) == 2


def test_a_missing_file_is_a_config_error_naming_it(tmp_path):
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(ConfigError, match=r"watermark\.hosts_file .*nowhere\.txt: file not found"):
        ExpectedHosts(str(missing)).current()
