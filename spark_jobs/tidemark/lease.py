"""One writer per pipeline: an exclusive lease with a fencing token.

Two streams of one pipeline must never run at once (a start that timed out and its retry, a job
on another host whose heartbeat looks stale, ``tidemark stream`` run by hand beside the
supervisor's): on object storage two drivers writing one Delta table can lose commits. Each
stream holds the pipeline's lease while it runs:

* The lease is a sequence of **epochs** under ``<warehouse>/<pipeline>/_lease/``: one small JSON
  object per epoch, ``<epoch>.json``, **created only if absent** (``O_EXCL`` on a disk; a PUT with
  ``If-None-Match: *`` on S3), so of two starters that want the same epoch exactly one gets it.
  The newest epoch is the lease; its number is the **fencing token**.
* A starter takes the next epoch when the newest one has expired or was released, or when its
  holder ran on this host and is provably gone (its pid and start time no longer name a live
  process: a killed job need not be waited for); otherwise it exits with one line naming the
  holder (:class:`LeaseHeld`).
* The holder renews its epoch (rewrites its own object with a later expiry) from the heartbeat
  loop, every few seconds, batches or not (:meth:`Lease.renew`), and checks that its epoch is
  still the newest before every Delta write (:meth:`Lease.check`, the table writer's fence).
* A holder that stops renewing (killed, paused, cut off) loses the lease ``ttl`` later to the
  next starter. If it resumes, its next renewal or its next write finds a newer epoch and raises
  :class:`Fenced` before anything is written; the stream stops with that line.

What it does not cover: a holder paused *between* a fence check and the write it guards, for
longer than the lease (a window of one Delta commit). Each batch's writes are idempotent per
(run, batch) (:mod:`tidemark.stream`), so such a write repeats one the new holder makes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark import object_store, storage, storage_settings
from tidemark.config import PipelineConfig
from tidemark.errors import LeaseError as LeaseError
from tidemark.timeutil import humanize_ms, now_ms

LEASE_DIR = "_lease"


class LeaseHeld(LeaseError):
    """Another writer holds the pipeline's lease."""


class Fenced(LeaseError):
    """This writer's lease was taken over: it must stop without writing."""


@dataclass(frozen=True)
class Epoch:
    number: int
    holder: dict[str, Any]  # who: pid, host, start time (tidemark.liveness.ProcessIdentity)
    renewed_at_ms: int
    expires_at_ms: int  # 0: released

    def to_json(self) -> str:
        return json.dumps(
            {
                "epoch": self.number,
                "holder": self.holder,
                "renewed_at_ms": self.renewed_at_ms,
                "expires_at_ms": self.expires_at_ms,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Epoch:
        data = json.loads(text)
        return cls(
            int(data["epoch"]),
            data.get("holder") or {},
            int(data["renewed_at_ms"]),
            int(data["expires_at_ms"]),
        )

    def describe(self, now: int) -> str:
        who = self.holder
        left = self.expires_at_ms - now
        return (
            f"pid {who.get('pid')} on host {who.get('host')} (lease epoch {self.number}, renewed "
            f"{humanize_ms(max(0, now - self.renewed_at_ms))} ago, expires in {humanize_ms(max(0, left))})"
        )


def _name(number: int) -> str:
    return f"{number:020d}.json"


def _numbers(names) -> list[int]:
    """The epochs among object or file ``names`` (``<epoch>.json``), ascending."""
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


class _Disk:
    """Epoch files in a local directory: create-if-absent is ``O_CREAT | O_EXCL``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def numbers(self) -> list[int]:
        try:
            names = [p.name for p in self.folder.iterdir()]
        except FileNotFoundError:
            return []
        return _numbers(names)

    def read(self, number: int) -> str | None:
        try:
            return (self.folder / _name(number)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def create(self, number: int, text: str) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.folder / _name(number), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        return True

    def replace(self, number: int, text: str) -> None:
        storage.write_text_atomic(self.folder / _name(number), text)


class _S3:
    """Epoch objects under an ``s3a://`` prefix: create-if-absent is a PUT with
    ``If-None-Match: *`` (S3's conditional write; 412 when the object exists), signed with
    Signature V4 here, since pyarrow's S3 file system cannot send the header."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.settings = storage_settings.storage_for(uri)

    def _key(self, number: int) -> str:
        return f"{self.uri}/{_name(number)}"

    def numbers(self) -> list[int]:
        return _numbers(u.rsplit("/", 1)[-1] for u in object_store.list_files(self.uri))

    def read(self, number: int) -> str | None:
        path = object_store.ObjectPath(self._key(number))
        try:
            return path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return None

    def create(self, number: int, text: str) -> bool:
        status = self._put(self._key(number), text.encode(), {"if-none-match": "*"})
        # 412: the object exists; 409: a concurrent conditional write of it won
        return status not in (409, 412)

    def replace(self, number: int, text: str) -> None:
        self._put(self._key(number), text.encode(), {})

    def _put(self, uri: str, body: bytes, extra: dict[str, str]) -> int:
        creds = storage_settings.credentials(self.settings)
        endpoint = (
            storage_settings.endpoint(self.settings, creds)
            or f"https://s3.{self.settings.region}.amazonaws.com"
        )
        parts = urllib.parse.urlsplit(uri)
        bucket, key = parts.netloc, parts.path.lstrip("/")
        base = urllib.parse.urlsplit(endpoint)
        if self.settings.path_style:
            host, path = base.netloc, f"/{bucket}/{key}"
        else:
            host, path = f"{bucket}.{base.netloc}", f"/{key}"
        path = urllib.parse.quote(path, safe="/-_.~")
        # a type of its own: urllib's default (a form) has some servers parse the body away
        extra = {**extra, "content-type": "application/json"}
        headers = _signed_headers("PUT", host, path, body, extra, creds, self.settings.region)
        url = f"{base.scheme}://{host}{path}"
        request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            if exc.code in (409, 412):
                return exc.code
            raise LeaseError(f"lease {uri}: the object store answered {exc.code} {exc.reason}") from None
        except OSError as exc:
            raise LeaseError(f"lease {uri}: cannot reach the object store at {endpoint} ({exc})") from None


def _signed_headers(
    method: str, host: str, path: str, body: bytes, extra: dict[str, str], creds: dict[str, str], region: str
) -> dict[str, str]:
    """AWS Signature Version 4 headers for one S3 request (no query string)."""
    now = dt.datetime.now(dt.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp, **extra}
    if creds.get("session_token"):
        headers["x-amz-security-token"] = creds["session_token"]
    names = sorted(headers)
    canonical = "\n".join(
        [method, path, "", *(f"{n}:{headers[n].strip()}" for n in names), "", ";".join(names), payload]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + creds.get("secret_key", "")).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.get('access_key', '')}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return headers


def lease_location(config: PipelineConfig) -> str:
    return f"{config.tables_root.rstrip('/')}/{LEASE_DIR}"


class Lease:
    """The pipeline's lease as one writer holds it (see the module docstring)."""

    def __init__(self, config: PipelineConfig, holder: dict[str, Any], ttl_ms: int | None = None) -> None:
        where = lease_location(config)
        self.store = _S3(where) if storage_settings.is_object_store(where) else _Disk(Path(where))
        self.pipeline = config.pipeline
        self.holder = holder
        self.ttl_ms = ttl_ms if ttl_ms is not None else config.lease_ttl
        self.epoch: Epoch | None = None

    def newest(self) -> Epoch | None:
        for number in reversed(self.store.numbers()):
            text = self.store.read(number)
            if text is not None:
                return Epoch.from_json(text)
        return None

    def acquire(self) -> int:
        """Take the next epoch, or raise :class:`LeaseHeld` naming the holder; returns the token."""
        for _ in range(3):
            now = now_ms()
            newest = self.newest()
            if newest is not None and newest.expires_at_ms > now and not _abandoned(newest):
                raise LeaseHeld(f"pipeline {self.pipeline} is being written by {newest.describe(now)}")
            epoch = Epoch((newest.number if newest else 0) + 1, self.holder, now, now + self.ttl_ms)
            if self.store.create(epoch.number, epoch.to_json()):
                self.epoch = epoch
                return epoch.number
        newest = self.newest()
        holder = newest.describe(now_ms()) if newest else "another starter"
        raise LeaseHeld(f"pipeline {self.pipeline} is being written by {holder}")

    def check(self) -> None:
        """Raise :class:`Fenced` unless this writer's epoch is still the newest."""
        if self.epoch is None:
            raise Fenced(f"pipeline {self.pipeline}: this writer holds no lease")
        numbers = self.store.numbers()
        if numbers and numbers[-1] != self.epoch.number:
            newest = self.newest()
            by = newest.describe(now_ms()) if newest else f"epoch {numbers[-1]}"
            raise Fenced(
                f"pipeline {self.pipeline}: this writer's lease (epoch {self.epoch.number}) was taken "
                f"over by {by}; stopping without writing"
            )

    def renew(self) -> None:
        """Extend this writer's epoch by ``ttl``; :class:`Fenced` when it was taken over."""
        self.check()
        assert self.epoch is not None
        now = now_ms()
        self.epoch = Epoch(self.epoch.number, self.holder, now, now + self.ttl_ms)
        self.store.replace(self.epoch.number, self.epoch.to_json())

    def release(self) -> None:
        """Give the lease up (a clean stop): the next starter need not wait for it to expire."""
        if self.epoch is None:
            return
        try:
            self.check()
        except Fenced:
            return
        now = now_ms()
        self.store.replace(self.epoch.number, Epoch(self.epoch.number, self.holder, now, 0).to_json())
        self.epoch = None


def holder_record() -> dict[str, Any]:
    """Who holds a lease: this process's identity (tidemark.liveness), without its job token
    (the lease lies beside the tables, where their readers can read it)."""
    from tidemark.liveness import ProcessIdentity

    record = ProcessIdentity.self().record()
    return {**record, "token": None, "host": record.get("host") or socket.gethostname()}


def _abandoned(epoch: Epoch) -> bool:
    """Was ``epoch`` held by a process of this host that no longer runs?"""
    from tidemark.liveness import ProcessIdentity, verify

    identity = ProcessIdentity.from_record(epoch.holder)
    return identity is not None and identity.host == socket.gethostname() and verify(identity).gone
