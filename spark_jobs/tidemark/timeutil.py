"""Time values used across Tidemark.

Every instant is an ``int`` of epoch **milliseconds** (UTC) and every duration an ``int`` of
milliseconds. Floats never hold time: they lose precision at millisecond scale after 2^53 µs and
make window boundaries drift. Conversion to text happens only at the edges (config, CLI, reports).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

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
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(text: str | int) -> int:
    """Parse ``"500ms" | "10s" | "1m" | "24h" | "7d"`` (or a bare int of ms) to milliseconds."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"duration must not be negative: {text}")
        return text
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r} (use a whole number with ms, s, m, h or d, e.g. '1m')")
    return int(match.group(1)) * _UNITS[match.group(2)]


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


def now_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)
