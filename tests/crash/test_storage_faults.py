"""Storage faults on the warehouse mid-stream: a full disk (a real tmpfs filled to the last byte)
and a permission error (the events directory made immutable). The batch must fail loudly; once
the fault is cleared a restart must finish with nothing lost, nothing duplicated, nothing
half-committed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, small_scenario, write_config
from test_exactly_once import finish, start_job

from tidemark.generator import generate_files
from tidemark.tables import read_local, table_exists


def _committed_batches(config) -> int:
    path = config.table_path("watermarks")
    return len(read_local(path)) if table_exists(path) else 0


def _run_until_first_commit_then(config_path: Path, config, fault) -> tuple[int, str]:
    proc = start_job(config_path)
    deadline = time.monotonic() + 180
    while _committed_batches(config) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the job finished before the fault could be injected"
    fault()
    return finish(proc)


@pytest.fixture
def small_tmpfs(tmp_path):
    mount_point = tmp_path / "warehouse-disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_disk_full_fails_the_batch_loudly_and_a_restart_completes_exactly_once(spark, tmp_path, small_tmpfs):
    config = write_config(tmp_path, name="full", warehouse=str(small_tmpfs))
    truth = generate_files(small_scenario(seed=31), config.source.path)
    filler = small_tmpfs / "filler"

    def fill_disk() -> None:
        with open(filler, "wb") as out:
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass

    code, out = _run_until_first_commit_then(tmp_path / "full.yaml", config, fill_disk)
    assert code != 0, "a batch hit a full disk and the job did not fail"
    assert "No space left on device" in out
    os.remove(filler)
    code, out = finish(start_job(tmp_path / "full.yaml"))
    assert code == 0, out[-3000:]
    assert_exactly_once(spark, config, truth)


def test_permission_error_fails_the_batch_loudly_and_a_restart_completes_exactly_once(spark, tmp_path):
    config = write_config(tmp_path, name="perm")
    truth = generate_files(small_scenario(seed=32), config.source.path)
    events_dir = Path(config.table_path("events"))

    def lock_events() -> None:
        subprocess.run(["chattr", "+i", str(events_dir)], check=True)

    try:
        code, out = _run_until_first_commit_then(tmp_path / "perm.yaml", config, lock_events)
    finally:
        subprocess.run(["chattr", "-i", str(events_dir)], check=False)
    assert code != 0, "a write was refused and the job did not fail"
    assert "Operation not permitted" in out or "Permission denied" in out
    code, out = finish(start_job(tmp_path / "perm.yaml"))
    assert code == 0, out[-3000:]
    assert_exactly_once(spark, config, truth)
