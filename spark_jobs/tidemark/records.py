"""The input record contract, parsed and validated in Spark.

One record per line, UTF-8 JSON::

    {"event_id": "h00042-000000001234", "host": "h00042", "event_time": 1763805601123,
     "msg_time": 1763805601500, "key": "checkout", "value": 2.5}

``event_id`` (non-empty string), ``host`` (``[A-Za-z0-9][A-Za-z0-9._:-]*``) and ``event_time``
(integer epoch ms) are required; ``msg_time`` (integer epoch ms), ``key`` (string) and ``value``
(a finite number: ``1e400`` reads as an infinite double and is quarantined) are optional; unknown
fields are ignored. A heartbeat ``{"host": ..., "event_time": ..., "heartbeat": true}`` advances
its host's progress and is not an event. Every other line becomes a quarantine row whose
``reason`` says what is wrong; parsing never raises on data.

The same :func:`parse_records` serves the stream and the batch recompute, and it depends only on
the line and its source's arrival timestamp (file modification time, Kafka timestamp), never on
the clock, so a replayed batch and the recompute classify every line identically.

Two paths, one verdict. The SQL validator below (Spark's ``try_parse_json`` into a VARIANT, typed
extraction, the rules in order) names the reason for every bad line. In front of it, a JVM UDF
(``spark_jobs/jvm/tidemark/udf/RecordParser.java``, compiled by set-up) reads a line in one pass of
Jackson's streaming parser and claims it only when it is sure the SQL validator would accept it
with the same fields; every other line goes the SQL way. The rules that depend on the line's
bytes or on configuration (size, UTF-8, minimum event time, clock skew), and the finite value,
run in SQL for every line (a line with a NUL byte is never claimed). ``validation.native_parser:
false`` turns the fast path off; the tests check both paths give the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import ValidationConfig
from tidemark.resources import SetupError
from tidemark.timeutil import format_instant_ms

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$"
MAX_ID_CHARS = 256
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_FLOAT_TYPES = ("FLOAT", "DOUBLE")

# Columns every parsed frame has, in this order.
PARSED_COLUMNS = [
    "raw",
    "source",
    "arrival_ms",
    "event_id",
    "host",
    "event_time",
    "msg_time",
    "key",
    "value",
    "heartbeat",
    "reason",
    "upstream_lw",
]


# The record's fields, extracted from the parsed object in one pass as a struct of variants
# (one navigation of the object instead of one per field); each field keeps its JSON type.
# An event's fields, in the order every table that stores events keeps them.
EVENT_FIELDS = ("event_id", "host", "event_time", "msg_time", "key", "value")
FIELDS = (*EVENT_FIELDS, "heartbeat")
_FIELD_STRUCT = "struct<" + ", ".join(f"{name}: variant" for name in FIELDS) + ">"

# The JVM fast path (RecordParser.java; its RETURN_TYPE, HOST_PATTERN and MAX_ID_CHARS must equal
# these, a test checks).
NATIVE_UDF = "tidemark_parse_record"
NATIVE_CLASS = "tidemark.udf.RecordParser"
NATIVE_TYPE = (
    "struct<event_id:string,host:string,event_time:bigint,msg_time:bigint,"
    "key:string,value:double,heartbeat:boolean>"
)
# The rules still checked in SQL on a line the fast path claimed (names of :func:`_checks`). It
# never claims an oversized line (not given to it), one with a NUL byte nor one with invalid
# UTF-8 (it sees U+FFFD there), so those checks run in SQL on every line. Nor does it claim an
# infinite value (it leaves exponents and big integers to SQL), but that check is one comparison
# and must hold whatever the fast path returns: a non-finite value would poison every sum.
LINE_AND_CONFIG_RULES = ("min_event_time", "skew_msg", "skew_arrival", "value_finite")
# An oversized line keeps only its first this many characters in ``raw`` (at most 4 KiB of UTF-8)
# and its size in ``reason``: the quarantine and the batch cache must not hold a hostile 100 MB
# line, and a prefix is enough to recognise its source.
OVERSIZED_RAW_CHARS = 1024


# -- what a parsed row is: quarantined, heartbeat or event ---------------------------------------
# The one rule, over the :data:`PARSED_COLUMNS` of a row: a row with a ``reason`` is quarantined
# (it never moves a host, whatever host it names); a valid row is a heartbeat when ``heartbeat``
# is true, else an event. The stream, the batch's counts and writes, and the recompute call these.


def is_quarantined_col() -> Column:
    """A line that broke a rule: its ``reason`` says which. It goes to ``quarantine`` only."""
    from pyspark.sql import functions as F

    return F.col("reason").isNotNull()


def is_heartbeat_col() -> Column:
    """A valid heartbeat: it moves its host's progress and is no event."""
    from pyspark.sql import functions as F

    return ~is_quarantined_col() & F.coalesce(F.col("heartbeat"), F.lit(False))


def is_event_col() -> Column:
    """A valid record that is not a heartbeat: the only rows that can be publisher retries."""
    from pyspark.sql import functions as F

    return ~is_quarantined_col() & ~F.coalesce(F.col("heartbeat"), F.lit(False))


def register_native_parser(spark: SparkSession) -> None:
    """Register the fast path's UDF in ``spark`` (once); a one-line SetupError when its jar is
    missing."""
    if spark.catalog.functionExists(NATIVE_UDF):
        return
    try:
        spark.udf.registerJavaFunction(NATIVE_UDF, NATIVE_CLASS, NATIVE_TYPE)
    except Exception as exc:
        if "load class" not in str(exc) and "ClassNotFound" not in str(exc):
            raise
        raise SetupError(
            f"record parser {NATIVE_CLASS} is not on the classpath (tidemark-udf.jar): run "
            "`make setup`, or set validation.native_parser: false"
        ) from None


def parse_records(lines: DataFrame, rules: ValidationConfig) -> DataFrame:
    """``lines(raw string, source string, arrival_ms long)`` -> :data:`PARSED_COLUMNS`.

    ``reason`` is NULL for a good record or heartbeat, else a one-line explanation. An oversized
    line's ``raw`` is cut to its first :data:`OVERSIZED_RAW_CHARS` characters (its reason gives
    its size and says so).

    Do not ``where()`` on the result directly: Spark pushes the filter below these projections
    and inlines the validation into the predicate, which then re-parses the line once per
    reference (10× the time). Filter after a cache or an aggregation, as the stream and
    :func:`tidemark.recompute.recompute_windows` do.
    """
    from pyspark.sql import functions as F

    raw = F.col("raw")
    fits = F.col("_bytes") <= rules.max_record_bytes
    kept_raw = F.when(fits, raw).otherwise(F.substring(raw, 1, OVERSIZED_RAW_CHARS))
    staged = _stage(lines, rules, fits)
    claimed = F.col("_n").isNotNull()

    def field(name: str, sql_type: str) -> Column:
        parsed = F.try_variant_get(F.col(f"_f.{name}"), "$", sql_type)
        return F.when(claimed, F.col(f"_n.{name}")).otherwise(parsed)

    typed = staged.select(
        "*",
        *(F.schema_of_variant(F.col(f"_f.{name}")).alias(f"_t_{name}") for name in FIELDS),
        field("event_id", "string").alias("event_id"),
        field("host", "string").alias("host"),
        field("event_time", "bigint").alias("event_time"),
        field("msg_time", "bigint").alias("msg_time"),
        field("key", "string").alias("key"),
        field("value", "double").alias("value"),
        F.coalesce(field("heartbeat", "boolean"), F.lit(False)).alias("heartbeat"),
    )
    is_heartbeat = F.col("heartbeat") & (claimed | (F.col("_t_heartbeat") == "BOOLEAN"))
    checks = _checks(rules)
    on_claimed = [check for check in checks if check[0] in LINE_AND_CONFIG_RULES]
    return typed.select(
        kept_raw.alias("raw"),
        "source",
        "arrival_ms",
        "event_id",
        "host",
        "event_time",
        "msg_time",
        F.coalesce(F.col("key"), F.lit("")).alias("key"),
        "value",
        is_heartbeat.alias("heartbeat"),
        F.when(claimed, _first_broken(on_claimed)).otherwise(_first_broken(checks)).alias("reason"),
        F.lit(None).cast("long").alias("upstream_lw"),
    )


def _stage(lines: DataFrame, rules: ValidationConfig, fits: Column) -> DataFrame:
    """The lines with their size (``_bytes``), the fast path's struct (``_n``, NULL where it did
    not claim the line) and, for the rest, the SQL parse (``_v`` the variant, ``_f`` its fields)."""
    from pyspark.sql import functions as F

    raw = F.col("raw")
    staged = lines.select("raw", "source", "arrival_ms", F.octet_length(raw).alias("_bytes"))
    if rules.native_parser:
        register_native_parser(lines.sparkSession)
        # Oversized lines are not parsed at all: a hostile 100 MB line must not be materialised.
        staged = staged.select("*", F.when(fits, F.call_function(NATIVE_UDF, raw)).alias("_n"))
        parse_in_sql = fits & F.col("_n").isNull()
    else:
        staged = staged.select("*", F.lit(None).cast(NATIVE_TYPE).alias("_n"))
        parse_in_sql = fits
    return (
        # Only the lines the fast path did not claim are parsed again.
        staged.select("*", F.when(parse_in_sql, F.try_parse_json(raw)).alias("_v"))
        # NULL unless the line is a JSON object; absent fields are NULL, JSON nulls VOID.
        .select("*", F.try_variant_get(F.col("_v"), "$", _FIELD_STRUCT).alias("_f"))
    )


def _absent(type_col: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(type_col).isNull() | (F.col(type_col) == "VOID")


Check = tuple[str, "Column", "Column | str"]


def _checks(rules: ValidationConfig) -> list[Check]:
    """Every rule as (name, broken?, reason), in the order a reader would check them: the line
    itself, the identity fields, the times, the optional fields."""
    return [*_line_checks(rules), *_identity_checks(), *_time_checks(rules), *_optional_checks()]


def _wrong_type(field: str, type_col: str, want: str) -> Column:
    from pyspark.sql import functions as F

    return F.concat(F.lit(f"{field} must be {want}, got "), F.col(type_col))


def _line_checks(rules: ValidationConfig) -> list[Check]:
    """Size, bytes and JSON shape of the line."""
    from pyspark.sql import functions as F

    raw, v = F.col("raw"), F.col("_v")
    return [
        (
            "oversized",
            F.col("_bytes") > rules.max_record_bytes,
            F.concat(
                F.lit("oversized record: "),
                F.col("_bytes").cast("string"),
                F.lit(f" bytes > limit {rules.max_record_bytes}"),
                # parse_records keeps only a prefix of such a line
                F.when(
                    F.length(raw) > OVERSIZED_RAW_CHARS,
                    F.lit(f" (raw: its first {OVERSIZED_RAW_CHARS} characters)"),
                ).otherwise(F.lit("")),
            ),
        ),
        ("nul", F.instr(raw, "\u0000") > 0, "NUL byte in record"),
        # Spark builds strings from the source's bytes without validating them.
        ("utf8", ~F.is_valid_utf8(raw), "invalid UTF-8"),
        (
            "truncated",
            v.isNull() & F.ltrim(raw).startswith("{") & ~F.rtrim(raw).endswith("}"),
            "truncated JSON",
        ),
        ("invalid_json", v.isNull(), "invalid JSON"),
        # The type is only rendered for the (rare) line that is not an object.
        ("not_object", F.col("_f").isNull(), F.concat(F.lit("not a JSON object: "), F.schema_of_variant(v))),
    ]


def _identity_checks() -> list[Check]:
    """heartbeat, event_id (not required of a heartbeat) and host."""
    from pyspark.sql import functions as F

    is_hb = F.coalesce(F.col("heartbeat"), F.lit(False)) & (F.col("_t_heartbeat") == "BOOLEAN")
    return [
        (
            "heartbeat_type",
            ~_absent("_t_heartbeat") & (F.col("_t_heartbeat") != "BOOLEAN"),
            _wrong_type("heartbeat", "_t_heartbeat", "a boolean"),
        ),
        ("event_id_missing", ~is_hb & _absent("_t_event_id"), "missing event_id"),
        (
            "event_id_type",
            ~is_hb & (F.col("_t_event_id") != "STRING"),
            _wrong_type("event_id", "_t_event_id", "a string"),
        ),
        ("event_id_empty", ~is_hb & (F.trim(F.col("event_id")) == ""), "empty event_id"),
        (
            "event_id_long",
            ~is_hb & (F.length("event_id") > MAX_ID_CHARS),
            f"event_id longer than {MAX_ID_CHARS} characters",
        ),
        ("host_missing", _absent("_t_host"), "missing host"),
        ("host_type", F.col("_t_host") != "STRING", _wrong_type("host", "_t_host", "a string")),
        ("host_empty", F.trim(F.col("host")) == "", "empty host"),
        (
            "host_pattern",
            ~F.col("host").rlike(HOST_PATTERN),
            "host has characters outside [A-Za-z0-9._:-] or is longer than 253",
        ),
    ]


def _time_checks(rules: ValidationConfig) -> list[Check]:
    """event_time and msg_time: types, the minimum, clock skew against msg_time and arrival."""
    from pyspark.sql import functions as F

    skew_s = rules.max_clock_skew / 1000
    min_et = format_instant_ms(rules.min_event_time)
    return [
        ("event_time_missing", _absent("_t_event_time"), "missing event_time"),
        (
            "event_time_type",
            ~F.col("_t_event_time").isin(*_INTEGER_TYPES),
            _wrong_type("event_time", "_t_event_time", "integer epoch ms"),
        ),
        (
            "min_event_time",
            F.col("event_time") < rules.min_event_time,
            F.lit(f"event_time before {min_et}"),
        ),
        (
            "msg_time_type",
            ~_absent("_t_msg_time") & ~F.col("_t_msg_time").isin(*_INTEGER_TYPES),
            _wrong_type("msg_time", "_t_msg_time", "integer epoch ms"),
        ),
        (
            "skew_msg",
            F.col("msg_time").isNotNull() & (F.col("event_time") - F.col("msg_time") > rules.max_clock_skew),
            F.concat(
                F.lit("clock skew: event_time "),
                ((F.col("event_time") - F.col("msg_time")) / 1000).cast("long").cast("string"),
                F.lit(f"s ahead of msg_time (limit {skew_s:g}s)"),
            ),
        ),
        (
            "skew_arrival",
            F.col("arrival_ms").isNotNull()
            & (F.col("event_time") - F.col("arrival_ms") > rules.max_clock_skew),
            F.concat(
                F.lit("clock skew: event_time "),
                ((F.col("event_time") - F.col("arrival_ms")) / 1000).cast("long").cast("string"),
                F.lit(f"s ahead of arrival (limit {skew_s:g}s)"),
            ),
        ),
    ]


def _optional_checks() -> list[Check]:
    """Types of the optional key and value, and a value that is a finite number: JSON has no
    NaN nor infinity, but a number beyond the range of a double (``1e400``, a 400-digit integer)
    reads as an infinite one, which would turn every sum it joins into Infinity or NaN."""
    from pyspark.sql import functions as F

    value = F.col("value")
    return [
        (
            "key_type",
            ~_absent("_t_key") & (F.col("_t_key") != "STRING"),
            _wrong_type("key", "_t_key", "a string"),
        ),
        (
            "value_type",
            ~_absent("_t_value")
            & ~(
                F.col("_t_value").isin(*_INTEGER_TYPES, *_FLOAT_TYPES)
                | F.col("_t_value").startswith("DECIMAL")
            ),
            _wrong_type("value", "_t_value", "a number"),
        ),
        (
            "value_finite",
            F.isnan(value) | (F.abs(value) == F.lit(float("inf"))),
            F.concat(
                F.lit("value must be a finite number, got "),
                value.cast("string"),
                F.when(~F.isnan(value), F.lit(" (beyond the range of a double)")).otherwise(F.lit("")),
            ),
        ),
    ]


def _first_broken(checks: list[Check]) -> Column:
    """The reason of the first broken rule, NULL when none is."""
    from pyspark.sql import functions as F

    expr = None
    for _name, condition, message in checks:
        msg = F.lit(message) if isinstance(message, str) else message
        expr = F.when(condition, msg) if expr is None else expr.when(condition, msg)
    assert expr is not None
    return expr.otherwise(F.lit(None).cast("string"))
