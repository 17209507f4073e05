"""Time values used across Tidemark.

Every instant is an ``int`` of epoch **milliseconds** (UTC) and every duration an ``int`` of
milliseconds. Floats never hold time: they lose precision at millisecond scale after 2^53 µs and
make window boundaries drift. Conversion to text happens only at the edges (config, CLI, reports).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

from tidemark.errors import UsageError

MS_PER_SECOND = 1_000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR

_UNITS = {
    "ms": 1,
    "s": MS_PER_SECOND,
    "m": MS_PER_MINUTE,
    "h": MS_PER_HOUR,
    "d": MS_PER_DAY,
}
# Spark's interval words (``1 minute``, ``10 seconds``, ``interval 7 days``), singular or plural
_WORDS = {
    "millisecond": 1,
    "second": MS_PER_SECOND,
    "minute": MS_PER_MINUTE,
    "hour": MS_PER_HOUR,
    "day": MS_PER_DAY,
    "week": 7 * MS_PER_DAY,
}
_NUMBER = r"\d+(?:\.\d+)?"
_SHORT = re.compile(rf"^({_NUMBER})\s*(ms|s|m|h|d)$")
_WORD_PART = re.compile(rf"({_NUMBER})\s*({'|'.join(_WORDS)})s?(?![a-z])", re.IGNORECASE)
_SPARK = re.compile(rf"^(?:interval\s+)?(?:{_WORD_PART.pattern}\s*)+$", re.IGNORECASE)
_ISO = re.compile(
    rf"^P(?:(?P<W>{_NUMBER})W)?(?:(?P<D>{_NUMBER})D)?"
    rf"(?:T(?=\d)(?:(?P<H>{_NUMBER})H)?(?:(?P<M>{_NUMBER})M)?(?:(?P<S>{_NUMBER})S)?)?$",
    re.IGNORECASE,
)
_ISO_MS = {"W": 7 * MS_PER_DAY, "D": MS_PER_DAY, "H": MS_PER_HOUR, "M": MS_PER_MINUTE, "S": MS_PER_SECOND}
_ISO_CALENDAR = re.compile(r"^P[^T]*[YM]", re.IGNORECASE)
_BARE = re.compile(rf"^-?{_NUMBER}$")
DURATION_FORMS = (
    "a number with a unit: 500ms, 10s, 1m, 24h, 7d; Spark's form: '500 milliseconds', "
    "'10 seconds', '1 minute', '2 hours', '1 day' (singular or plural, several parts as in "
    "'1 hour 30 minutes'); or ISO-8601: PT10S, PT1M, PT1H30M, P1D (whole milliseconds)"
)


def bare_number_message(value: object) -> str:
    """The error for a duration written without a unit: ``90 is a bare number; ...``."""
    n = str(value).strip()
    return f"{n} is a bare number; write it with a unit: {n}ms, {n}s, {n}m, '{n} seconds' or PT{n}S"


def _exact_ms(text: str, parts: list[tuple[str, int]]) -> int:
    total = sum((Decimal(number) * unit for number, unit in parts), Decimal(0))
    if total != total.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of milliseconds")
    return int(total)


def parse_duration_ms(text: str | int) -> int:
    """Parse a duration to milliseconds: ``"500ms" | "10s" | "1m" | "24h" | "7d"``, Spark's
    ``"10 seconds" | "1 minute" | "interval 2 hours"``, ISO-8601 ``"PT1M" | "PT0.5S" | "P1D"``,
    or (Python callers) an int of ms. A number in text without a unit (``"90"``) is refused: 90
    what? Config files refuse a bare int too (:mod:`tidemark.config`)."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"duration must not be negative: {text}")
        return text
    value = str(text).strip()
    if isinstance(text, float) or (_BARE.match(value) and value != "0"):
        raise ValueError(bare_number_message(value))
    if value == "0":
        return 0
    if match := _SHORT.match(value):
        return _exact_ms(value, [(match.group(1), _UNITS[match.group(2)])])
    if _SPARK.match(value):
        return _exact_ms(value, [(n, _WORDS[w.lower()]) for n, w in _WORD_PART.findall(value)])
    if (match := _ISO.match(value)) and value.upper() != "P":
        return _exact_ms(value, [(n, _ISO_MS[k]) for k, n in match.groupdict().items() if n is not None])
    if _ISO_CALENDAR.match(value):
        raise ValueError(f"{value!r}: months and years have no fixed length; write days (P30D)")
    raise ValueError(f"not a duration: {text!r} (write 1m, '1 minute' or PT1M; units ms, s, m, h, d)")


def format_duration_ms(ms: int) -> str:
    """Shortest exact rendering: 60000 -> '1m', 90000 -> '90s', 1500 -> '1500ms'."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def humanize_ms(ms: int) -> str:
    """Readable, approximate: 235583 -> '3m55.6s', 1500 -> '1.5s', 86400000 -> '1d0h'."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < MS_PER_SECOND:
        return f"{sign}{ms}ms"
    if ms < MS_PER_MINUTE:
        return f"{sign}{ms / MS_PER_SECOND:.1f}s"
    if ms < MS_PER_HOUR:
        return f"{sign}{ms // MS_PER_MINUTE}m{(ms % MS_PER_MINUTE) / MS_PER_SECOND:.1f}s"
    if ms < MS_PER_DAY:
        return f"{sign}{ms // MS_PER_HOUR}h{(ms % MS_PER_HOUR) // MS_PER_MINUTE}m"
    return f"{sign}{ms // MS_PER_DAY}d{(ms % MS_PER_DAY) // MS_PER_HOUR}h"


def parse_instant_ms(text: str | int) -> int:
    """Parse an ISO-8601 instant (``2025-11-22T10:00:00Z``; no zone means UTC) or epoch ms."""
    if isinstance(text, int):
        return text
    value = str(text).strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(
            f"not an instant: {text!r} (use ISO-8601 like 2025-11-22T10:00:00Z or epoch ms)"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def format_instant_ms(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds, or '-' for None."""
    if ms is None:
        return "-"
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def check_range(start_ms: int | None, end_ms: int | None) -> None:
    """Refuse a range ``[start, end)`` that holds no instant: a :class:`UsageError` "end (...) must
    be after start (...)". Either end may be open (``None``)."""
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise UsageError(
            f"end ({format_instant_ms(end_ms)}) must be after start ({format_instant_ms(start_ms)})"
        )


def now_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)
