"""Delta statistics from Parquet footers (tidemark.filecommit), without Spark."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark import filecommit

UTC = dt.UTC
TYPES = {"n": "long", "host": "string", "at": "timestamp", "ok": "boolean", "x": "double"}


def _stats(tmp_path, table: pa.Table, columns=tuple(TYPES), **write) -> dict:
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, **write)
    return json.loads(filecommit.file_stats(pq.read_metadata(path), filecommit.Plan(TYPES, columns)))


def _table(**overrides) -> pa.Table:
    data = {
        "n": pa.array([5, None, 3, 9], pa.int64()),
        "host": pa.array(["b", "a", None, "c"]),
        "at": pa.array(
            [
                dt.datetime(2026, 11, 26, 1, 2, 3, 456789, tzinfo=UTC),
                None,
                None,
                dt.datetime(2026, 1, 1, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "ok": pa.array([True, False, None, True]),
        "x": pa.array([None, None, None, None], pa.float64()),
    }
    data.update(overrides)
    return pa.table(data)


def test_footer_statistics_are_delta_statistics_over_every_row_group(tmp_path):
    stats = _stats(tmp_path, _table(), row_group_size=2)  # two row groups, merged
    assert stats["numRecords"] == 4
    assert stats["nullCount"] == {"n": 1, "host": 1, "at": 2, "ok": 1, "x": 4}
    # timestamps as Delta writes them: UTC, to the millisecond; booleans and all-null columns
    # have no minimum or maximum
    assert stats["minValues"] == {"n": 3, "host": "a", "at": "2026-01-01T00:00:00.000Z"}
    assert stats["maxValues"] == {"n": 9, "host": "c", "at": "2026-11-26T01:02:03.456Z"}


def test_only_the_statistics_columns_are_described(tmp_path):
    stats = _stats(tmp_path, _table(), columns=("n",))
    assert (
        stats["nullCount"] == {"n": 1} and stats["minValues"] == {"n": 3} and stats["maxValues"] == {"n": 9}
    )


def test_a_long_string_keeps_a_prefix_as_its_minimum_and_no_maximum(tmp_path):
    long = "h" * 40
    stats = _stats(tmp_path, _table(host=pa.array([long, long + "z", None, long])))
    assert stats["minValues"]["host"] == "h" * filecommit.STRING_PREFIX
    assert "host" not in stats["maxValues"] and stats["nullCount"]["host"] == 1


def test_int96_timestamps_get_no_minimum_or_maximum(tmp_path):
    # Parquet keeps no ordering statistics for INT96 (Spark's legacy timestamps): unknown, so
    # left out (a reader then cannot skip on the column), never guessed.
    stats = _stats(tmp_path, _table(), use_deprecated_int96_timestamps=True)
    assert "at" not in stats["minValues"] and "at" not in stats["maxValues"]
    assert stats["minValues"]["n"] == 3 and stats["nullCount"]["n"] == 1


def test_statistics_columns_follow_the_table_properties():
    columns = ["a", "b", "c", "d"]
    assert filecommit.stats_columns({"delta.dataSkippingStatsColumns": "c, a"}, columns) == ("a", "c")
    assert filecommit.stats_columns({"delta.dataSkippingNumIndexedCols": "2"}, columns) == ("a", "b")
    assert filecommit.stats_columns({"delta.dataSkippingNumIndexedCols": "-1"}, columns) == tuple(columns)
    assert filecommit.stats_columns({}, [f"c{i}" for i in range(40)]) == tuple(f"c{i}" for i in range(32))


def test_tables_on_object_storage_keep_sparks_delta_writer():
    assert filecommit.applies_to("/data/warehouse/events")
    assert filecommit.applies_to("file:///data/warehouse/events")
    assert not filecommit.applies_to("s3a://bucket/warehouse/events")
