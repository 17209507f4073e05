"""``tidemark schema``: the JSON Schema of a pipeline config file."""

from __future__ import annotations

import argparse
import json

from tidemark.cli.common import echo


def cmd_schema(args: argparse.Namespace) -> int:
    from tidemark.config_schema import config_json_schema

    echo(json.dumps(config_json_schema(), indent=2))
    return 0


def add_schema_command(sub: argparse._SubParsersAction) -> None:
    sc = sub.add_parser(
        "schema",
        help="print the JSON Schema of a pipeline config file (docs/pipeline.schema.json)",
        description="Print the JSON Schema (2020-12) of a pipeline config file, for editors and CI.",
    )
    sc.set_defaults(func=cmd_schema)
