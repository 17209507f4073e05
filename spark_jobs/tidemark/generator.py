"""Synthetic multi-host log scenarios, deterministic for a given seed.

Each of ``hosts`` hosts writes ``events_per_host_per_minute`` records a minute in event-time order.
A record *arrives* (lands in the landing zone) at ``event_time + host_delay`` (0.2-3 s). Arrival
time decides the file: file ``k`` holds the records arriving in ``[start + k*span,
start + (k+1)*span)``, sorted by arrival, so each host's records stay in event-time order across
files. Faults:

* lagging hosts: ``lag_share`` of the hosts (chosen by the seed) stop delivering at minute
  ``lag_start_minute`` for ``lag_minutes`` (a collector outage); the records they wrote meanwhile
  land together when it ends, still in order, and the hosts are live again after;
* publisher retries: ``duplicate_rate`` of the records get retry copies (same ``event_id``, same
  content): one, or with ``max_retry_copies`` up to that many (uniformly), each landing 30 s to
  5 min after the copy before it, usually in a later file (3 copies of one record can be ~10 min
  apart);
* malformed lines: ``malformed_rate`` of the records are followed by a bad line of one of
  several kinds (invalid JSON, truncated, missing field, wrong type).

With ``final_heartbeat`` every host ends with a heartbeat at the scenario's end time, as an idle
host does, so the last windows can close once every host's heartbeat has landed.

Files are written whole (to a hidden temp name, then renamed) with increasing modification
times, the order Spark's file source reads them in. ``_scenario.json`` beside them records the
parameters and the ground truth (unique events, copies, bad lines, lagging hosts).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidemark.errors import UsageError
from tidemark.timeutil import MS_PER_MINUTE, format_instant_ms, now_ms, parse_instant_ms

DEFAULT_START = "2025-11-22T10:00:00Z"
DEFAULT_KEYS = ("checkout", "search", "view", "cart", "login")
MAX_RETRY_DELAY_MS = 5 * MS_PER_MINUTE
MIN_RETRY_DELAY_MS = 30_000
MANIFEST = "_scenario.json"


@dataclass(frozen=True)
class Scenario:
    hosts: int = 10_000
    minutes: int = 20
    events_per_host_per_minute: int = 6
    keys: tuple[str, ...] = DEFAULT_KEYS
    lag_share: float = 0.0005
    lag_minutes: float = 5.0
    lag_start_minute: float = 2.0
    duplicate_rate: float = 0.01
    max_retry_copies: int = 1  # retry copies of a retried record: 1..this many
    malformed_rate: float = 0.0001
    seed: int = 42
    start_ms: int = field(default_factory=lambda: parse_instant_ms(DEFAULT_START))
    file_span_s: int = 60
    final_heartbeat: bool = True
    # > 0: every host's collector also writes a heartbeat each this many seconds (event time the
    # tick, delivered with the host's delay, so after every record before it; none from a host in
    # its outage), as a collector flushing every few seconds would: idle gaps stop holding the
    # precise watermark back. 0: none (scenarios stay byte-identical to what they always were).
    heartbeat_every_s: int = 0

    def __post_init__(self) -> None:
        checks = {
            "hosts": self.hosts >= 1,
            "minutes": self.minutes >= 1,
            "events_per_host_per_minute": self.events_per_host_per_minute >= 1,
            "lag_share": 0 <= self.lag_share <= 1,
            "lag_minutes": self.lag_minutes >= 0,
            "lag_start_minute": self.lag_start_minute >= 0,
            "duplicate_rate": 0 <= self.duplicate_rate <= 1,
            "max_retry_copies": self.max_retry_copies >= 1,
            "malformed_rate": 0 <= self.malformed_rate <= 1,
            "file_span_s": self.file_span_s >= 1,
            "heartbeat_every_s": self.heartbeat_every_s >= 0,
            "keys": len(self.keys) >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise UsageError(f"scenario: invalid value for {', '.join(bad)}")

    @property
    def host_names(self) -> list[str]:
        width = max(5, len(str(self.hosts - 1)))
        return [f"h{i:0{width}d}" for i in range(self.hosts)]

    def lagging_hosts(self) -> list[str]:
        count = round(self.lag_share * self.hosts)
        names = self.host_names
        return sorted(random.Random(self.seed ^ 0x1A6).sample(names, count))

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.minutes * MS_PER_MINUTE


@dataclass
class Truth:
    unique_events: int = 0
    duplicate_copies: int = 0
    malformed_lines: int = 0
    heartbeats: int = 0
    files: int = 0
    lines: int = 0


def _malformed(kind: int, rng: random.Random, host: str, et: int) -> str:
    good = f'{{"event_id":"bad-{rng.getrandbits(48):012x}","host":"{host}","event_time":{et}}}'
    return [
        "this is not json",
        good[: len(good) // 2],
        f'{{"host":"{host}","event_time":{et},"key":"view"}}',
        f'{{"event_id":"x-{rng.getrandbits(32):08x}","host":"{host}","event_time":"{et}"}}',
        f'{{"event_id":"y-{rng.getrandbits(32):08x}","host":12345,"event_time":{et}}}',
    ][kind % 5]


Bucket = tuple[int, int, list[str]]  # (file index, bucket end ms, lines)


class _Pending:
    """Lines waiting for their landing file: ``(arrival, order written, line)`` per file index."""

    def __init__(self, start_ms: int, span_ms: int) -> None:
        self.start_ms, self.span = start_ms, span_ms
        self.files: dict[int, list[tuple[int, int, str]]] = {}
        self.order = 0

    def put(self, arrival: int, line: str) -> None:
        index = (arrival - self.start_ms) // self.span
        self.files.setdefault(index, []).append((arrival, self.order, line))
        self.order += 1

    def due(self, horizon: int | None) -> Iterator[Bucket]:
        """The files whose span ends at or before ``horizon`` (None: every file), oldest first."""
        ends = {i: self.start_ms + (i + 1) * self.span for i in self.files}
        for index in sorted(i for i in ends if horizon is None or ends[i] <= horizon):
            yield _flush(index, ends[index], self.files.pop(index))


@dataclass
class _Hosts:
    """Every host's collector in a scenario: its delivery delay, its outage, its next sequence."""

    s: Scenario
    rng: random.Random
    truth: Truth
    pending: _Pending
    names: list[str]
    delays: list[int]
    held: list[bool]
    outage: tuple[int, int]  # [start, end) of the lagging hosts' outage, epoch ms
    seq: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, s: Scenario, truth: Truth) -> _Hosts:
        rng = random.Random(s.seed)
        names = s.host_names
        lagging = set(s.lagging_hosts())
        outage_start = s.start_ms + int(s.lag_start_minute * MS_PER_MINUTE)
        outage = (outage_start, outage_start + int(s.lag_minutes * MS_PER_MINUTE))
        delays = [rng.randint(200, 3000) for _ in names]
        held = [host in lagging for host in names]
        pending = _Pending(s.start_ms, s.file_span_s * 1000)
        return cls(s, rng, truth, pending, names, delays, held, outage, [0] * s.hosts)

    def events(self, base: int) -> None:
        """Every host's events of the minute starting at ``base``, with retries and bad lines."""
        s, rng, truth, put = self.s, self.rng, self.truth, self.pending.put
        keys, per_min = s.keys, s.events_per_host_per_minute
        outage_start, outage_end = self.outage
        seq, held = self.seq, self.held
        for h, host in enumerate(self.names):
            offsets = sorted(rng.randrange(MS_PER_MINUTE) for _ in range(per_min))
            delay = self.delays[h]
            for off in offsets:
                et = base + off
                n = seq[h]
                seq[h] = n + 1
                mt = et + rng.randrange(500)
                key = keys[rng.randrange(len(keys))]
                line = (
                    f'{{"event_id":"{host}-{n:012d}","host":"{host}","event_time":{et},'
                    f'"msg_time":{mt},"key":"{key}","value":{rng.randrange(1000) / 100}}}'
                )
                arrival = et + delay
                if held[h] and outage_start <= et < outage_end:
                    arrival = outage_end + delay  # delivered in one burst when the outage ends
                put(arrival, line)
                truth.unique_events += 1
                if rng.random() < s.duplicate_rate:
                    # One random draw more only when several copies are possible: scenarios with
                    # one copy stay byte-identical to what they always were.
                    copies = 1 if s.max_retry_copies == 1 else rng.randint(1, s.max_retry_copies)
                    retry_at = arrival
                    for _ in range(copies):
                        retry_at += rng.randint(MIN_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS)
                        put(retry_at, line)
                    truth.duplicate_copies += copies
                if rng.random() < s.malformed_rate:
                    put(arrival, _malformed(truth.malformed_lines, rng, host, et))
                    truth.malformed_lines += 1

    def heartbeats(self, base: int) -> None:
        """The collectors' heartbeats of the minute starting at ``base`` (none during an outage)."""
        step = self.s.heartbeat_every_s * 1000
        outage_start, outage_end = self.outage
        for tick in range(base + (-base) % step, base + MS_PER_MINUTE, step):
            for h, host in enumerate(self.names):
                if self.held[h] and outage_start <= tick < outage_end:
                    continue  # the collector is down: it claims nothing
                self.pending.put(
                    tick + self.delays[h], f'{{"host":"{host}","event_time":{tick},"heartbeat":true}}'
                )
                self.truth.heartbeats += 1

    def final_heartbeats(self) -> None:
        end = self.s.end_ms
        for h, host in enumerate(self.names):
            self.pending.put(end + self.delays[h], f'{{"host":"{host}","event_time":{end},"heartbeat":true}}')
            self.truth.heartbeats += 1


def iter_buckets(s: Scenario, truth: Truth | None = None) -> Iterator[Bucket]:
    """Yield each file's lines in arrival order, oldest file first, using bounded memory."""
    hosts = _Hosts.of(s, truth if truth is not None else Truth())
    for minute in range(s.minutes):
        base = s.start_ms + minute * MS_PER_MINUTE
        hosts.events(base)
        if s.heartbeat_every_s:
            hosts.heartbeats(base)
        if minute == s.minutes - 1 and s.final_heartbeat:
            hosts.final_heartbeats()
        # Everything still to come arrives at or after the next minute's start.
        yield from hosts.pending.due(base + MS_PER_MINUTE)
    yield from hosts.pending.due(None)


def _flush(index: int, end_ms: int, items: list[tuple[int, int, str]]) -> Bucket:
    items.sort()
    return index, end_ms, [line for _, _, line in items]


def write_file(directory: Path, index: int, lines: list[str], mtime: float | None = None) -> Path:
    """Write one landing file whole: hidden temp name, fsync, rename, then set its mtime."""
    final = directory / f"part-{index:06d}.jsonl"
    tmp = directory / f".part-{index:06d}.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("\n".join(lines))
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, final)
    if mtime is not None:
        os.utime(final, (mtime, mtime))
    return final


def generate_files(
    s: Scenario,
    directory: str | os.PathLike[str],
    progress: Callable[[str], None] | None = None,
) -> Truth:
    """Bounded mode: write the whole scenario as fast as possible."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    truth = Truth()
    # Modification times one second apart, ending now: Spark reads files oldest first.
    total = (
        s.minutes * 60 // s.file_span_s
        + int(
            (s.lag_minutes * MS_PER_MINUTE + s.max_retry_copies * MAX_RETRY_DELAY_MS)
            // (s.file_span_s * 1000)
        )
        + 2
    )
    base = time.time() - total - 1
    for index, _end, lines in iter_buckets(s, truth):
        write_file(out, index, lines, mtime=base + index)
        truth.files += 1
        truth.lines += len(lines)
        if progress:
            progress(f"file {index + 1}: {len(lines):,} lines ({truth.lines:,} so far)")
    _write_manifest(out, s, truth)
    return truth


def generate_live(
    s: Scenario,
    directory: str | os.PathLike[str],
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    history_minutes: int = 0,
) -> Truth:
    """Live mode: event time ~ now, each file written when its arrival span has passed.

    ``history_minutes`` > 0 starts the scenario that long ago: the files whose arrival time has
    passed are written at once, each dated (mtime) at its arrival time so the file source reads
    them in order, and the rest paced as usual. The scenario still lasts ``s.minutes`` in all.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    start = (now_ms() - history_minutes * MS_PER_MINUTE) // 1000 * 1000
    live = Scenario(**{**asdict(s), "keys": tuple(s.keys), "start_ms": start})
    truth = Truth()
    _write_manifest(out, live, truth)
    for index, end_ms, lines in iter_buckets(live, truth):
        wait = (end_ms - now_ms()) / 1000
        if wait > 0:
            sleep(wait)
        write_file(out, index, lines, mtime=end_ms / 1000 if wait < 0 else None)
        truth.files += 1
        truth.lines += len(lines)
        if progress:
            progress(f"file {index + 1} at {format_instant_ms(end_ms)}: {len(lines):,} lines")
    _write_manifest(out, live, truth)
    return truth


def _write_manifest(out: Path, s: Scenario, truth: Truth) -> None:
    manifest = {
        "scenario": {**asdict(s), "keys": list(s.keys), "start": format_instant_ms(s.start_ms)},
        "truth": asdict(truth),
        "lagging_hosts": s.lagging_hosts(),
    }
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def read_manifest(directory: str | os.PathLike[str]) -> dict:
    return json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
