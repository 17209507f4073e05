"""MkDocs hook: the reference pages, generated from the code at every build (never committed).

* ``reference/configuration.md``: every field of the pipeline config's pydantic models
  (``tidemark.config.PipelineConfig`` and its nested blocks): type, default, bounds and the
  field's description or the comment written above it in ``config.py``.
* ``reference/cli.md``: every ``tidemark`` subcommand with its options and help, walked from
  ``tidemark.cli.build_parser()``.
* ``examples.md``: the example pipelines under ``examples/``, each file shown whole.

``mkdocs.yml`` names this file under ``hooks:``; ``tests/unit/test_docs.py`` checks the pages.
"""

from __future__ import annotations

import argparse
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]

# config fields that a YAML file spells differently from the model (PipelineConfig._window_block)
YAML_NAMES = {"window": "window.size", "allowed_lateness": "window.allowed_lateness"}


# -- configuration ---------------------------------------------------------------------------------


def _field_comments(model: type) -> dict[str, str]:
    """The ``#`` comment lines written directly above each field in the model's class body."""
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        found = re.match(r"^    (\w+)\s*:", line)
        if found and pending:
            comments[found.group(1)] = " ".join(pending)
        pending = []
    return comments


def _doc(model: type) -> str:
    own = model.__dict__.get("__doc__")
    return inspect.cleandoc(own) if own else ""


def _validator_names(metadata: list[Any]) -> list[str]:
    return [getattr(getattr(m, "func", None), "__qualname__", "") for m in metadata]


def _parts(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any], bool]:
    """(the type without Annotated and None, all metadata found on the way, nullable)."""
    metadata = list(metadata)
    nullable = False
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        nullable = len(members) < len(get_args(annotation))
        if len(members) == 1:
            annotation = members[0]
    if get_origin(annotation) is typing.Annotated:
        base, *extra = get_args(annotation)
        inner, more, inner_null = _parts(base, extra)
        return inner, metadata + more, nullable or inner_null
    return annotation, metadata, nullable


def _kind(metadata: list[Any]) -> str | None:
    names = _validator_names(metadata)
    if any(n.endswith("_duration") for n in names):
        return "duration"
    if any(n.endswith("_instant") for n in names):
        return "instant"
    return None


def _type_name(annotation: Any, metadata: list[Any]) -> str:
    from pydantic import BaseModel

    kind = _kind(metadata)
    if kind == "duration":
        return "duration (`30s`, `5m`, `1h`, `7d`)"
    if kind == "instant":
        return "instant (ISO-8601, UTC)"
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (list, tuple, set):
        (item,) = get_args(annotation)[:1]
        return f"list of {_type_name(*_parts(item, [])[:2])}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"map of {_type_name(*_parts(key, [])[:2])} to {_type_name(*_parts(value, [])[:2])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(*_parts(a, [])[:2]) for a in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "block"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(metadata: list[Any]) -> list[str]:
    from tidemark.timeutil import format_duration_ms

    duration = _kind(metadata) == "duration"
    out = []
    for m in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None and not callable(value):
                shown = format_duration_ms(value) if duration and isinstance(value, int) else value
                out.append(f"{sign} {shown}")
        if isinstance(getattr(m, "limit", None), str) and isinstance(getattr(m, "most", None), int):
            out.append(f"≤ {m.limit}")  # config_types.AtMost
            continue
        func = getattr(m, "func", None)
        if func is not None and "_at_most" in getattr(func, "__qualname__", ""):
            cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=False))
            if "most" in cells:
                out.append(f"≤ {format_duration_ms(cells['most'].cell_contents)}")
    return out


def _default(field: Any, metadata: list[Any]) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from tidemark.timeutil import format_duration_ms, format_instant_ms

    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(block)"
    if value is None:
        return "`null`"
    kind = _kind(metadata)
    if kind == "duration" and isinstance(value, int):
        return f"`{format_duration_ms(value)}`"
    if kind == "instant" and isinstance(value, int):
        return f"`{format_instant_ms(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ({}, []):
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" or " " in value else f"`{value}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


# hand-written pages whose annotated YAML examples describe keys the code leaves uncommented
ANNOTATED_PAGES = ("pipelines.md", "airflow.md", "object-storage.md")


def _yaml_comments() -> dict[str, str]:
    """``{"source.max_files_per_trigger": "bounds a micro-batch ..."}``: the trailing comments of
    the YAML examples in :data:`ANNOTATED_PAGES`, by dotted key (the first one wins)."""
    found: dict[str, str] = {}
    for name in ANNOTATED_PAGES:
        page = ROOT / "docs" / name
        if not page.is_file():
            continue
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            stack: list[tuple[int, str]] = []
            for line in block.splitlines():
                key = re.match(r"^( *)([a-z_]+):(.*)$", line)
                if not key:
                    continue
                indent, name_, rest = len(key.group(1)), key.group(2), key.group(3)
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                path = ".".join([k for _, k in stack] + [name_])
                comment = re.search(r"(?:^|\s)#\s*(.*)$", rest)
                if comment and path not in found:
                    found[path] = comment.group(1).strip()
                stack.append((indent, name_))
    return found


def config_models() -> list[tuple[str, type]]:
    """(dotted prefix, model) for the pipeline config and every block nested in it, depth first."""
    from pydantic import BaseModel

    from tidemark.config import PipelineConfig

    found: list[tuple[str, type]] = []

    def walk(prefix: str, model: type) -> None:
        found.append((prefix, model))
        for name, field in model.model_fields.items():
            annotation, _, _ = _parts(field.annotation, field.metadata)
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(f"{prefix}{name}.", annotation)

    walk("", PipelineConfig)
    return found


def config_reference() -> str:
    from pydantic import BaseModel

    out = [
        "# Configuration reference",
        "",
        "Generated from the pydantic models in `spark_jobs/tidemark/config*.py` each time the site is",
        "built. One YAML file per pipeline, validated at start-up: an unknown key, a wrong type or a",
        "value out of bounds fails with one line naming the file and the key. Relative paths resolve",
        "against `$TIDEMARK_HOME` when set, otherwise against the current directory. Durations are",
        "written `500ms`, `30s`, `5m`, `1h` or `7d`; every number must be finite. A walk-through with",
        "an example is [Pipelines](../pipelines.md).",
        "",
    ]
    from_pages = _yaml_comments()
    for prefix, model in config_models():
        title = "Top level" if not prefix else f"`{prefix.rstrip('.')}`"
        out += [f"## {title}", ""]
        if _doc(model):
            out += [_doc(model).replace("\n", " "), ""]
        comments = _field_comments(model)
        out += ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            annotation, metadata, nullable = _parts(field.annotation, field.metadata)
            key = YAML_NAMES.get(prefix + name, prefix + name)
            type_name = _type_name(annotation, metadata) + (" or `null`" if nullable else "")
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                anchor = (prefix + name).replace(".", "")
                type_name = f"block ([below](#{anchor}))"
            description = field.description or comments.get(name, "")
            if isinstance(annotation, type) and issubclass(annotation, BaseModel) and not description:
                description = _doc(annotation).split("\n\n")[0].replace("\n", " ")
            description = description or from_pages.get(key, from_pages.get(prefix + name, ""))
            row = [
                f"`{key}`",
                type_name,
                _default(field, metadata),
                ", ".join(_bounds(metadata)),
                description,
            ]
            out.append("| " + " | ".join(_cell(str(c)) for c in row) + " |")
        out.append("")
    return "\n".join(out)


# -- CLI -------------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _option_row(action: argparse.Action) -> str | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
        return None
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            names += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
    else:
        names = f"`{action.metavar or action.dest}`"
    helptext = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
    default = ""
    if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS):
        default = f"`{action.default}`"
    if action.option_strings and action.required:
        default = "**required**"
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        helptext += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return f"| {names} | {_cell(default)} | {_cell(helptext)} |"


def _command_section(path: str, parser: argparse.ArgumentParser, help_line: str, level: int) -> list[str]:
    out = [f"{'#' * level} `{path}`", ""]
    if help_line:
        out += [help_line[0].upper() + help_line[1:] + ".", ""]
    if parser.description and parser.description != help_line:
        out += [parser.description, ""]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out += ["```text", re.sub(r"\s+", " ", usage), "```", ""]
    for group in parser._action_groups:
        rows = [r for r in map(_option_row, group._group_actions) if r]
        if not rows:
            continue
        title = group.title or "options"
        out += [f"**{title[0].upper() + title[1:]}**", ""]
        if group.description:
            out += [group.description, ""]
        out += ["| option | default | help |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        out += [parser.epilog, ""]
    for name, sub in _subcommands(parser).items():
        out += _command_section(f"{path} {name}", sub, _help_of(parser, name), min(level + 1, 4))
    return out


def cli_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """(``tidemark generate``, its parser) for every subcommand, nested ones included."""
    from tidemark.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(path: str, parser: argparse.ArgumentParser) -> None:
        for name, sub in _subcommands(parser).items():
            found.append((f"{path} {name}", sub))
            walk(f"{path} {name}", sub)

    walk("tidemark", build_parser())
    return found


def cli_reference() -> str:
    from tidemark.cli import build_parser

    parser = build_parser()
    out = [
        "# CLI reference",
        "",
        "Generated from `tidemark.cli.build_parser()` each time the site is built; `tidemark COMMAND",
        "--help` prints the same. Bad input ends a command with one line on stderr (`tidemark: error:",
        "...`) and exit 2; the other exit codes are named under each command.",
        "",
    ]
    if parser.description:
        out += [parser.description, ""]
    top = [r for r in map(_option_row, parser._actions) if r]
    if top:
        out += ["| option | default | help |", "|---|---|---|", *top, ""]
    out += ["| command | what it does |", "|---|---|"]
    for name in _subcommands(parser):
        out.append(f"| [`tidemark {name}`](#tidemark-{name}) | {_cell(_help_of(parser, name))} |")
    out.append("")
    for name, sub in _subcommands(parser).items():
        out += _command_section(f"tidemark {name}", sub, _help_of(parser, name), 2)
    return "\n".join(out)


# -- examples --------------------------------------------------------------------------------------


def examples_page() -> str:
    """``examples/README.md`` (its links to files made plain: the files follow), then every
    example pipeline file shown whole."""
    out = ["# Examples", ""]
    readme = ROOT / "examples" / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
        text = re.sub(r"^# .*\n", "", text, count=1)
        text = re.sub(r"\[([^\]]+)\]\((?!https?:)[^)]*\)", r"\1", text)
        out += [text.strip(), ""]
    out += [
        "## The files",
        "",
        "Every key is described in the [configuration reference](reference/configuration.md).",
        "",
    ]
    files = sorted(p for p in (ROOT / "examples").rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        out.append("No example is in this checkout.")
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        out += [f"### `{rel}`", "", "```yaml", path.read_text(encoding="utf-8").rstrip(), "```", ""]
    return "\n".join(out)


# -- the hook --------------------------------------------------------------------------------------

PAGES = {
    "reference/configuration.md": config_reference,
    "reference/cli.md": cli_reference,
    "examples.md": examples_page,
}


def on_files(files: Files, config: Any, **_: Any) -> Files:
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    return files
