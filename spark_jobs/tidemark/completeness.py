"""Completeness in the tables: how far a pipeline's ``windows`` table is closed and final, told to
any Delta reader (delta-rs, Spark, Trino...) without Tidemark's internal tables.

**What the stream records.**

* Table properties of ``windows``, raised by the batch that advances the watermark, never lowered:

  ============================== ===================================================================
  ``tidemark.watermark``         the committed watermark, ISO-8601 UTC (``2026-01-01T10:20:00.000Z``):
                                 every window ending at or before it is closed, its revision 0 in
                                 the table (a record arriving later is late)
  ``tidemark.final_through``     the watermark less ``window.allowed_lateness``: every window ending
                                 at or before it is final, its ``is_final`` row in the table (no
                                 more revisions)
  ``tidemark.watermark_ms``,     the same instants in epoch milliseconds
  ``tidemark.final_through_ms``
  ``tidemark.window_ms``         the window size, so a range that is not on window boundaries is
                                 answered by the windows covering it
  ``tidemark.batch``             the batch whose commit raised them
  ============================== ===================================================================

* Commit info ``userMetadata`` (Delta's ``DESCRIBE HISTORY`` column): a JSON object with the same
  keys (``"tidemark.watermark_ms"`` etc., numbers as numbers) on every commit batch N makes to
  ``events``, ``late_events`` and ``windows`` (the batch's own watermark), and on the commit that
  raises the properties. It describes the version it is on: at a ``windows`` commit of batch N
  every window closed by batch N's watermark is in the table, which holds for time travel too.

**Where it goes in the commit protocol** (:mod:`tidemark.batch`: outputs, state, the commit
marker last). The properties are raised *after* the commit marker (the batch's row of
``watermarks``), by a commit of their own (:meth:`tidemark.batch_outputs.BatchOutputs.publish_completeness`),
so they are always a copy of a committed fact: they never claim more than the committed watermark,
and the windows they claim were written before the marker. A SIGKILL

* before or among the batch's outputs or state: the properties still hold the previous batch's
  claim (at most the committed watermark); a ``windows`` commit already made carries the batch's
  watermark in its ``userMetadata``, true of its content (its windows are in it);
* between the marker and the properties: the properties lag the committed watermark. The restart
  replays the batch, finds its marker and skips it whole, and the skip raises them
  (:class:`tidemark.batch.BatchProcessor`); any later batch would too, since each raises them to
  its own watermark whatever they hold;
* after the properties: nothing to do (a replay finds them already there).

Why not before the marker: the claim would rest on the replay recomputing the same watermark.
It does from the same input, state and batch time, but not if the hosts list
(``watermark.hosts_file``) changed between the kill and the restart: the replay would commit a
lower watermark, and the table would claim the higher one for ever (never lowered), ahead of the
status, the sensors and the reconciliation. Why not before the windows write: a reader would see
an hour complete whose windows are not in the table yet (``tests/crash/test_completeness.py``
compares what each claim promised, at every kill, with the events and the finished table). The
cost of after: a reader sees an hour complete one metadata commit (tens of ms) after the marker,
or after the replay when a kill lands in between. The commit ``userMetadata`` is written with
the outputs, before the marker, so the newest one may lead the committed watermark by a batch;
it claims only what its own version holds.

**Never backwards.** Each raise reads the table's current values and writes the larger, field by
field (:meth:`Completeness.raised_by`): a replayed batch, a restart, a lowered precision or a
longer allowed lateness never lowers what a reader was told. One stream writes a pipeline's
tables (its lease), so read-then-write races no other publisher; a concurrent metadata commit
(``tidemark maintain`` setting retention properties) fails ours, which is tried again on a fresh
read (:data:`PUBLISH_ATTEMPTS`).

**Only ``windows`` gets properties.** A metadata commit fails a concurrent Spark ``OPTIMIZE`` of
the same table (``MetadataChangedException``; maintenance retries it): ``windows`` compacts in
seconds, but the ``ZORDER`` of ``events`` runs for minutes and a metadata commit every batch would
fail it every time. ``events`` and ``late_events`` carry the claim in their commits'
``userMetadata`` only; :func:`completeness` reads that when a table has no properties.

**Readers.** :func:`completeness` reads one table's claim with delta-rs (no JVM) and
:class:`Completeness` answers "is ``[start, end)`` complete, is it final?"; ``tidemark
completeness`` prints it. A reader without Tidemark reads the same properties
(``DeltaTable(path).metadata().configuration``, ``SHOW TBLPROPERTIES``): see
docs/concepts/watermark.md, "Completeness in the tables".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tidemark import faults, object_store
from tidemark import tables as T
from tidemark.timeutil import format_instant_ms
from tidemark.windows import TumblingWindows, covering

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = [
    "BATCH",
    "FINAL_THROUGH",
    "FINAL_THROUGH_MS",
    "PUBLISH_ATTEMPTS",
    "WATERMARK",
    "WATERMARK_MS",
    "WINDOW_MS",
    "Completeness",
    "completeness",
    "publish",
    "read_claim",
]

WATERMARK = "tidemark.watermark"
WATERMARK_MS = "tidemark.watermark_ms"
FINAL_THROUGH = "tidemark.final_through"
FINAL_THROUGH_MS = "tidemark.final_through_ms"
WINDOW_MS = "tidemark.window_ms"
BATCH = "tidemark.batch"

# Tries of a property commit that lost to a concurrent metadata commit.
PUBLISH_ATTEMPTS = 3
# Commits :func:`completeness` looks back through for a claim in ``userMetadata`` (a table without
# the properties: maintenance's OPTIMIZE and VACUUM commits carry none).
HISTORY_LOOKBACK = 100


def _int(value: Any) -> int | None:
    """A property's or a JSON value's integer; None for anything else (missing, malformed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class Completeness:
    """How far a table is complete (closed) and final, in epoch ms; None: nothing claimed.

    ``version`` is the table version it was read at and ``source`` where: ``"properties"``,
    ``"commit"`` (a commit's ``userMetadata``) or ``"none"``."""

    watermark_ms: int | None = None
    final_through_ms: int | None = None
    window_ms: int | None = None
    batch_id: int | None = None
    version: int | None = None
    source: str = "none"

    # -- the writer's side -------------------------------------------------------------------
    @classmethod
    def of(cls, batch_id: int, watermark_ms: int | None, windows: TumblingWindows) -> Completeness:
        """What batch ``batch_id`` claims with watermark ``watermark_ms`` (None: nothing yet)."""
        if watermark_ms is None:
            return cls(window_ms=windows.size_ms, batch_id=batch_id)
        return cls(
            watermark_ms=watermark_ms,
            final_through_ms=watermark_ms - windows.allowed_lateness_ms,
            window_ms=windows.size_ms,
            batch_id=batch_id,
        )

    def properties(self) -> dict[str, str]:
        """The table properties of this claim (strings, as Delta stores them)."""
        found: dict[str, str] = {}
        if self.watermark_ms is not None:
            found[WATERMARK] = format_instant_ms(self.watermark_ms)
            found[WATERMARK_MS] = str(self.watermark_ms)
        if self.final_through_ms is not None:
            found[FINAL_THROUGH] = format_instant_ms(self.final_through_ms)
            found[FINAL_THROUGH_MS] = str(self.final_through_ms)
        if self.window_ms is not None:
            found[WINDOW_MS] = str(self.window_ms)
        if self.batch_id is not None:
            found[BATCH] = str(self.batch_id)
        return found

    def user_metadata(self) -> str:
        """The commit info ``userMetadata`` of this claim: compact JSON, numbers as numbers."""
        found: dict[str, Any] = {}
        if self.batch_id is not None:
            found[BATCH] = self.batch_id
        if self.watermark_ms is not None:
            found[WATERMARK] = format_instant_ms(self.watermark_ms)
            found[WATERMARK_MS] = self.watermark_ms
        if self.final_through_ms is not None:
            found[FINAL_THROUGH] = format_instant_ms(self.final_through_ms)
            found[FINAL_THROUGH_MS] = self.final_through_ms
        if self.window_ms is not None:
            found[WINDOW_MS] = self.window_ms
        return json.dumps(found, separators=(",", ":"))

    def raised_by(self, claim: Completeness) -> dict[str, str]:
        """The properties to write so that a table claiming ``self`` claims the larger of the two,
        field by field; empty when ``claim`` raises nothing (never lower a value)."""
        watermark = _larger(self.watermark_ms, claim.watermark_ms)
        final = _larger(self.final_through_ms, claim.final_through_ms)
        if watermark == self.watermark_ms and final == self.final_through_ms:
            return {}
        raised = replace(claim, watermark_ms=watermark, final_through_ms=final)
        return {k: v for k, v in raised.properties().items() if self.properties().get(k) != v}

    # -- the reader's side -------------------------------------------------------------------
    @classmethod
    def from_properties(cls, configuration: Mapping[str, str], version: int | None = None) -> Completeness:
        """The claim a table's properties hold (``DeltaTable.metadata().configuration``)."""
        watermark = _int(configuration.get(WATERMARK_MS))
        return cls(
            watermark_ms=watermark,
            final_through_ms=_int(configuration.get(FINAL_THROUGH_MS)),
            window_ms=_int(configuration.get(WINDOW_MS)),
            batch_id=_int(configuration.get(BATCH)),
            version=version,
            source="properties" if watermark is not None else "none",
        )

    @classmethod
    def from_user_metadata(cls, text: str | None, version: int | None = None) -> Completeness | None:
        """The claim in a commit's ``userMetadata``; None when it holds no watermark."""
        try:
            found = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(found, dict) or _int(found.get(WATERMARK_MS)) is None:
            return None
        return cls(
            watermark_ms=_int(found.get(WATERMARK_MS)),
            final_through_ms=_int(found.get(FINAL_THROUGH_MS)),
            window_ms=_int(found.get(WINDOW_MS)),
            batch_id=_int(found.get(BATCH)),
            version=version,
            source="commit",
        )

    def _covered_end(self, start_ms: int, end_ms: int) -> int:
        if end_ms <= start_ms:
            raise ValueError(f"empty range: end {end_ms} must be after start {start_ms}")
        return covering(start_ms, end_ms, self.window_ms)[1] if self.window_ms else end_ms

    def is_complete(self, start_ms: int, end_ms: int) -> bool:
        """Is every window overlapping ``[start, end)`` closed: all its on-time records in the
        table, anything later a late record (:meth:`tidemark.windows.TumblingWindows.is_closed`)?"""
        end = self._covered_end(start_ms, end_ms)
        return self.watermark_ms is not None and end <= self.watermark_ms

    def is_final(self, start_ms: int, end_ms: int) -> bool:
        """Is every window overlapping ``[start, end)`` final: its ``is_final`` row in the table,
        no revision to come (:meth:`tidemark.windows.TumblingWindows.is_final`)?"""
        end = self._covered_end(start_ms, end_ms)
        return self.final_through_ms is not None and end <= self.final_through_ms

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON: both instants as ISO-8601 (None when unclaimed) and ms."""
        return {
            "watermark": None if self.watermark_ms is None else format_instant_ms(self.watermark_ms),
            "watermark_ms": self.watermark_ms,
            "final_through": (
                None if self.final_through_ms is None else format_instant_ms(self.final_through_ms)
            ),
            "final_through_ms": self.final_through_ms,
            "window_ms": self.window_ms,
            "batch": self.batch_id,
            "version": self.version,
            "source": self.source,
        }


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def read_claim(table: DeltaTable) -> Completeness:
    """The claim of an open table: its properties; without them the newest claim in its commits'
    ``userMetadata`` (:data:`HISTORY_LOOKBACK` commits back); else nothing claimed."""
    version = table.version()
    claim = Completeness.from_properties(table.metadata().configuration, version)
    if claim.watermark_ms is not None:
        return claim
    for commit in table.history(limit=HISTORY_LOOKBACK):
        found = Completeness.from_user_metadata(commit.get("userMetadata"), commit.get("version"))
        if found is not None:
            return found
    return Completeness(version=version)


def completeness(table_path: str, storage_options: Mapping[str, str] | None = None) -> Completeness:
    """How complete the Delta table at ``table_path`` is, from the table alone (delta-rs, no JVM).

    ``storage_options`` are delta-rs's (``AWS_ENDPOINT_URL``, ...); without them a location's are
    the ones its pipeline's config registered (:func:`tidemark.storage.delta_options`). Raises
    ``deltalake.exceptions.TableNotFoundError`` when there is no table."""
    if storage_options is None:
        return read_claim(T.open_table(table_path))
    from deltalake import DeltaTable

    with object_store.reading(table_path):
        return read_claim(DeltaTable(table_path, storage_options=dict(storage_options)))


def publish(path: str, claim: Completeness, table: str) -> Completeness | None:
    """Raise the completeness properties of the table at ``path`` (named ``table``, for the fault
    points ``before:properties:<table>`` and ``after:properties:<table>``) to ``claim``, never
    lowering one; the commit carries the claim as its ``userMetadata``. Returns what the table
    claims afterwards; None when there is no table yet (nothing closed: the next batch raises
    them). A concurrent metadata commit is retried on a fresh read (:data:`PUBLISH_ATTEMPTS`)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    batch_id = claim.batch_id if claim.batch_id is not None else -1
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        delta = T.open_if_exists(path)
        if delta is None:
            return None
        current = Completeness.from_properties(delta.metadata().configuration, delta.version())
        changes = current.raised_by(claim)
        if not changes:
            return current
        faults.reached(f"before:properties:{table}", batch_id)
        metadata = {"userMetadata": claim.user_metadata(), "tidemark_batch": str(batch_id)}
        try:
            with object_store.reading(path):
                delta.alter.set_table_properties(
                    changes, raise_if_not_exists=False, commit_properties=CommitProperties(metadata)
                )
        except CommitFailedError:
            if attempt == PUBLISH_ATTEMPTS:
                raise
            continue
        T.drop_stale_checksum(path)  # the commit may have checkpointed (tidemark.tables.write_rs)
        faults.reached(f"after:properties:{table}", batch_id)
        return Completeness.from_properties(delta.metadata().configuration, delta.version())  # updated
    raise AssertionError("unreachable: the last attempt returns or raises")
