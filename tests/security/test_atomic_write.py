"""storage.write_text_atomic on a local disk: durable (the file's data and the directory entry
fsynced) and clean (a write that fails, e.g. on a full disk, keeps the old content and leaves no
temporary file behind; two writers never share a temporary file)."""

from __future__ import annotations

import errno
import io
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from tidemark import storage


def _others(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != name)


class _FullDisk(io.RawIOBase):
    """A file whose writes store part of the data, then fail as a full disk does."""

    def __init__(self, real) -> None:
        self.real = real

    def write(self, data) -> int:
        self.real.write(data[:3])
        self.real.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.real.close()

    def close(self) -> None:
        self.real.close()


def test_a_write_that_fails_keeps_the_old_content_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    storage.write_text_atomic(target, '{"old": true}')
    real_open, real_write = io.open, os.write

    def full_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return _FullDisk(handle) if any(c in mode for c in "wax+") else handle

    def full_write(fd, data):
        real_write(fd, bytes(data)[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io, "open", full_open)
    monkeypatch.setattr(os, "write", full_write)
    try:
        storage.write_text_atomic(target, '{"new": true, "padding": "' + "x" * 10_000 + '"}')
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        raise AssertionError("the failed write was not reported")
    monkeypatch.undo()
    assert target.read_text() == '{"old": true}'
    assert _others(tmp_path, "state.json") == []


def test_a_real_file_size_limit_keeps_the_old_content_and_leaves_no_temporary_file(tmp_path):
    """The OS refuses the write (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC), whatever
    calls the implementation makes."""
    target = tmp_path / "state.json"
    target.write_text("old", encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from tidemark import storage
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            storage.write_text_atomic(Path({str(target)!r}), "y" * 100_000)
        except OSError as exc:
            print("errno", exc.errno)
            sys.exit(0)
        sys.exit("the failed write was not reported")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"errno {errno.EFBIG}"
    assert target.read_text(encoding="utf-8") == "old"
    assert _others(tmp_path, "state.json") == []


def test_the_file_and_its_directory_are_fsynced(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "state.json"
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    storage.write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert synced == ["file", "dir"]


def test_two_writers_of_one_file_in_one_process_use_their_own_temporary_files(tmp_path, monkeypatch):
    """A second write of the same file while the first is between write and rename (another
    thread: the heartbeat beside the batch) must not take over or remove the first one's
    temporary file."""
    target = tmp_path / "state.json"
    real_replace = os.replace
    nested: list[bool] = []

    def replace_after_another_write(src, dst) -> None:
        if not nested:
            nested.append(True)
            storage.write_text_atomic(target, "second")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_another_write)
    storage.write_text_atomic(target, "first")
    monkeypatch.undo()
    assert target.read_text() == "first"
    assert _others(tmp_path, "state.json") == []
