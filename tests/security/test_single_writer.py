"""Finding 4: one writer per pipeline (tidemark.lease). On files: two real streams started at
once, and a holder paused past its lease (SIGSTOP) then resumed (SIGCONT). On S3 (the project's
S3 API server): the same lease protocol, its conditional create a real ``If-None-Match: *`` PUT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import listen_ports, small_scenario, write_config

from tidemark import lease as L
from tidemark import tables as T
from tidemark.generator import generate_files

REPO = Path(__file__).resolve().parents[2]
TTL = "6s"


def _holder(pid: int) -> dict:
    return {"pid": pid, "host": "elsewhere.example", "start_ticks": 1}


def _protocol(config) -> None:
    """Two writers of one pipeline, each with a lease of its own, as two processes would be."""
    first, second = L.Lease(config, _holder(1), ttl_ms=3_000), L.Lease(config, _holder(2), ttl_ms=3_000)
    assert first.acquire() == 1
    held = r"being written by pid 1 on host elsewhere\.example \(lease epoch 1"
    with pytest.raises(L.LeaseHeld, match=held):
        second.acquire()
    first.renew()
    first.check()
    time.sleep(3.2)  # the first stops renewing: expired
    assert second.acquire() == 2
    with pytest.raises(L.Fenced, match="taken over by pid 2"):
        first.check()
    with pytest.raises(L.Fenced):
        first.renew()
    second.release()
    third = L.Lease(config, _holder(3), ttl_ms=3_000)
    assert third.acquire() == 3  # released: no wait


def test_the_lease_protocol_on_a_disk(tmp_path):
    _protocol(write_config(tmp_path))


def test_a_create_race_has_one_winner_on_a_disk(tmp_path):
    store = L.Lease(write_config(tmp_path), _holder(1)).store
    assert store.create(7, "{}") is True
    assert store.create(7, "{}") is False


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    [port] = listen_ports(1)
    env = {
        **os.environ,
        "TIDEMARK_S3_DIR": str(tmp_path_factory.mktemp("s3")),
        "TIDEMARK_S3_PORT": str(port),
    }
    subprocess.run([str(REPO / "scripts" / "s3.sh"), "start"], env=env, check=True, capture_output=True)
    creds = {"AWS_ACCESS_KEY_ID": "tidemark-test", "AWS_SECRET_ACCESS_KEY": "tidemark-test-secret"}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    yield f"http://127.0.0.1:{port}"
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    subprocess.run([str(REPO / "scripts" / "s3.sh"), "stop"], env=env, check=True, capture_output=True)


def _s3_config(tmp_path, url: str):
    from tidemark import object_store, storage_settings

    config = write_config(
        tmp_path,
        name="lease",
        warehouse="s3a://tidemark-lease/warehouse",
        checkpoint="s3a://tidemark-lease/checkpoints/lease",
        storage={"endpoint": url, "path_style": True},
    )
    storage_settings.register(config)
    object_store.ensure_bucket(config.warehouse)
    return config


def test_the_lease_protocol_on_s3(tmp_path, s3):
    _protocol(_s3_config(tmp_path, s3))


def test_a_create_race_has_one_winner_on_s3(tmp_path, s3):
    """The conditional PUT: the second create of one epoch is refused by the server (412)."""
    store = L.Lease(_s3_config(tmp_path, s3), _holder(1)).store
    assert isinstance(store, L._S3)
    assert store.create(9, '{"first": true}') is True
    assert store.create(9, '{"second": true}') is False
    assert store.read(9) == '{"first": true}'


# -- real streams ---------------------------------------------------------------------------------


def _stream(config_path: Path) -> subprocess.Popen:
    """``tidemark stream`` in its own session, its output to a file (a pipe nobody reads while it
    runs would fill and stop it): ``proc.log``."""
    log = config_path.with_name(f"{config_path.stem}.{time.monotonic_ns()}.out")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli", "stream", "--config", str(config_path)],
            env={**os.environ, "TIDEMARK_SPARK_LOG_LEVEL": "ERROR"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _output(proc: subprocess.Popen) -> str:
    return proc.log.read_text(errors="replace")  # type: ignore[attr-defined]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return _output(proc)


@pytest.mark.slow
def test_two_streams_started_at_once_one_runs_the_other_refuses(tmp_path):
    config = write_config(tmp_path, name="two", lease_ttl=TTL, trigger_interval="1s")
    generate_files(small_scenario(minutes=2), config.source.path)
    path = tmp_path / "two.yaml"
    a, b = _stream(path), _stream(path)
    try:
        _wait_for(lambda: a.poll() is not None or b.poll() is not None, 240, "one stream to refuse")
        loser, winner = (a, b) if a.poll() is not None else (b, a)
        out = _output(loser)
        assert loser.returncode == 6, out[-2000:]
        [line] = [x for x in out.splitlines() if x.startswith("tidemark: error:")]
        assert "is being written by pid" in line and f"pid {winner.pid}" in line, line
        time.sleep(3)
        assert winner.poll() is None, "the holder stopped"
    finally:
        for proc in (a, b):
            _stop(proc)


@pytest.mark.slow
def test_a_paused_holder_loses_the_lease_and_writes_nothing_when_it_resumes(tmp_path):
    config = write_config(tmp_path, name="pause", lease_ttl=TTL, trigger_interval="1s")
    scenario = small_scenario(minutes=4)
    generate_files(scenario, config.source.path)
    landing = Path(config.source.path)
    later = sorted(landing.iterdir())[len(list(landing.iterdir())) // 2 :]
    parked = tmp_path / "parked"
    parked.mkdir()
    for f in later:  # the second half lands after the takeover
        f.rename(parked / f.name)
    path = tmp_path / "pause.yaml"
    first = _stream(path)
    second = None
    try:
        watermarks = config.table_path("watermarks")
        _wait_for(lambda: T.table_exists(watermarks), 240, "the first stream's first batch")
        time.sleep(3)
        os.killpg(first.pid, signal.SIGSTOP)
        committed = len(T.read_local(watermarks))
        time.sleep(7)  # past the 6 s lease
        second = _stream(path)
        for f in sorted(parked.iterdir()):
            f.rename(landing / f.name)
        _wait_for(lambda: len(T.read_local(watermarks)) > committed, 240, "the second stream's batches")
        os.killpg(first.pid, signal.SIGCONT)
        _wait_for(
            lambda: first.poll() is not None, 60, "the resumed stream to stop\n" + _output(first)[-3000:]
        )
        out = _output(first)
        assert first.returncode == 6, out[-3000:]
        [line] = [x for x in out.splitlines() if x.startswith("tidemark: error:")]
        assert "was taken over by pid" in line and "stopping without writing" in line, line
        # every batch the first stream reported was committed before it was paused
        reported = [int(m) for m in re.findall(r"\] batch (\d+):", out)]
        assert reported and max(reported) < committed, (reported, committed)
        assert second.poll() is None, "the new holder stopped"
    finally:
        outs = [_stop(p) for p in (first, second) if p is not None]
    marks = T.read_local(config.table_path("watermarks"))
    assert marks["batch_id"].is_unique, "a batch was committed twice"
    assert any("batch" in out for out in outs[1:]), "the second stream ran no batch"


def test_the_conditional_put_is_signed_as_botocore_signs_it(monkeypatch):
    """A known answer: botocore's S3SigV4Auth signed this very request (same time, keys,
    headers and body) to this signature (checked once with the S3 server's own botocore)."""
    import datetime as dt

    fixed = dt.datetime(2026, 11, 27, 3, 0, 0, tzinfo=dt.UTC)

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed

    monkeypatch.setattr(L, "dt", type("clock", (), {"datetime": Clock, "UTC": dt.UTC}))
    headers = L._signed_headers(
        "PUT",
        "127.0.0.1:9000",
        "/bkt/_lease/00000000000000000001.json",
        b'{"a": 1}',
        {"if-none-match": "*", "content-type": "application/json"},
        {"access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"},
        "us-east-1",
    )
    assert headers["authorization"].endswith(
        "Signature=33cc235ce832a11f39caacef6013172e04aa4bfef307891d70a3a8479cafc3fc"
    )
