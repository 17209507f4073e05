"""The JSON Schema (2020-12) of a pipeline config file, from the models
(:class:`tidemark.config.PipelineConfig`). Committed as ``docs/pipeline.schema.json``;
``tidemark schema`` prints it, and a test keeps the two identical."""

from __future__ import annotations

from typing import Any

from tidemark.config import PipelineConfig
from tidemark.timeutil import format_duration_ms, format_instant_ms


def _readable_defaults(node: Any) -> None:
    """Durations' and instants' defaults as a file writes them (``1m``, not ``60000``)."""
    if isinstance(node, dict):
        text = str(node.get("description", ""))
        default = node.get("default")
        if isinstance(default, int) and not isinstance(default, bool):
            if text.startswith("A duration"):
                node["default"] = format_duration_ms(default)
            elif text.startswith("An instant"):
                node["default"] = format_instant_ms(default)
        for value in node.values():
            _readable_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _readable_defaults(value)


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a pipeline config file, from the models: durations are
    strings in the accepted forms, the window is a size or a block, no unknown key anywhere.
    Committed as ``docs/pipeline.schema.json``; ``tidemark schema`` prints it."""
    schema = PipelineConfig.model_json_schema()
    _readable_defaults(schema)
    props = schema["properties"]
    lateness = props.pop("allowed_lateness")
    size = props.pop("window")
    default = size.pop("default")
    block = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"size": {**size, "default": default}, "allowed_lateness": lateness},
    }
    props["window"] = {
        "description": "The tumbling window: its size (a duration), or a block of size and allowed_lateness.",
        "default": default,
        "anyOf": [size, block],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": "Tidemark pipeline config",
        "description": (
            "One YAML file per pipeline (tidemark.config). String values may use ${VAR} and "
            "${VAR:-default} (environment variables); $${ is a literal ${."
        ),
    }
