"""The value types of a pipeline config's fields, and its error.

* :data:`DurationMs`: an int of milliseconds; from a file, a string in one of the
  :data:`tidemark.timeutil.DURATION_FORMS` (a bare number is refused there, except ``0``). Its
  JSON Schema is :data:`DURATION_PATTERN`.
* :data:`InstantMs`: an int of epoch milliseconds; ISO-8601 or epoch milliseconds in a file.
* :func:`at_most`: a duration's upper bound, ``Annotated[DurationMs, at_most("7d")]``.
* :class:`StrictModel`: the base of every config block (no unknown key, frozen, finite floats).
* :class:`~tidemark.errors.ConfigError`: a config that cannot be used (one line naming file and
  field); its home is :mod:`tidemark.errors`, and the config's modules raise it from here.

The file rules hold under the validation context ``{FROM_FILE: True}``, which only a file's
loader sets (:func:`tidemark.config.load_config`); Python callers keep passing ints.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import CoreSchema, core_schema

from tidemark.errors import ConfigError as ConfigError
from tidemark.timeutil import (
    DURATION_FORMS,
    bare_number_message,
    format_duration_ms,
    parse_duration_ms,
    parse_instant_ms,
)

# The validation context under which the file rules hold (a bare number is no duration, no
# top-level allowed_lateness): set by load_config, absent for Python callers.
FROM_FILE = "from_file"


def from_file(info: ValidationInfo) -> bool:
    """Is this value being validated from a file (the file rules hold)?"""
    return bool(info.context and info.context.get(FROM_FILE))


def _duration(value: Any, info: ValidationInfo) -> int:
    if from_file(info) and isinstance(value, int | float) and not isinstance(value, bool) and value != 0:
        raise ValueError(bare_number_message(value))
    return parse_duration_ms(value)


def _instant(value: Any) -> int:
    return parse_instant_ms(value)


def _ci(word: str) -> str:
    """``abc`` -> ``[aA][bB][cC]``: JSON Schema patterns have no case-insensitive flag."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_NUM = "[0-9]+(?:[.][0-9]+)?"
_WORD = "(?:" + "|".join(_ci(w) for w in ("millisecond", "second", "minute", "hour", "day", "week")) + ")"
# the forms parse_duration_ms accepts, as a JSON Schema (ECMA-262) pattern
DURATION_PATTERN = (
    rf"^[ \t]*(?:0|{_NUM}[ \t]*(?:ms|s|m|h|d)"
    rf"|(?:{_ci('interval')}[ \t]+)?(?:{_NUM}[ \t]*{_WORD}[sS]?[ \t]*)+"
    rf"|(?![pP]$)[pP](?:{_NUM}[wW])?(?:{_NUM}[dD])?"
    rf"(?:[tT](?=[0-9])(?:{_NUM}[hH])?(?:{_NUM}[mM])?(?:{_NUM}[sS])?)?)[ \t]*$"
)
_DURATION_DESCRIPTION = f"A duration: {DURATION_FORMS}. A bare number is refused, except 0."
_DURATION_SCHEMA = {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"const": 0}]}
_INSTANT_DESCRIPTION = "An instant: ISO-8601 (2025-11-22T10:00:00Z; no zone means UTC) or epoch milliseconds."

DurationMs = Annotated[
    int,
    BeforeValidator(_duration),
    WithJsonSchema({**_DURATION_SCHEMA, "description": _DURATION_DESCRIPTION}),
]
InstantMs = Annotated[
    int,
    BeforeValidator(_instant),
    WithJsonSchema({"type": ["string", "integer"], "description": _INSTANT_DESCRIPTION}),
]


class AtMost:
    """A duration's upper bound, checked after parsing: ``Annotated[DurationMs, at_most("7d")]``.

    Every duration has one. Beyond it a value is a typo (``90d`` for ``90m``), and a huge one
    overflows Spark's long milliseconds or keeps state, files or a stalled job for months; the
    error names the bound (the field comes from the location), and so does the JSON Schema."""

    def __init__(self, limit: str) -> None:
        self.limit = limit
        self.most = parse_duration_ms(limit)

    def _check(self, value: int) -> int:
        if value > self.most:
            raise ValueError(f"{format_duration_ms(value)} is above the maximum, {self.limit}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        out = dict(handler(schema))
        out["description"] = f"{out.get('description', '')} At most {self.limit}.".strip()
        return out


def at_most(limit: str) -> AtMost:
    return AtMost(limit)


class StrictModel(BaseModel):
    """The base of every config block: an unknown key is an error, a block is frozen."""

    # allow_inf_nan=False: every float setting (precision, targets, quality thresholds, Spark conf
    # values) must be a finite number. YAML spells NaN and infinity (.nan, .inf), and either
    # compares false with every bound, so a NaN threshold would pass every check it guards.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
