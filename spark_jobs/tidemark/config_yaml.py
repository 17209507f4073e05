"""Reading a pipeline config file, and saying where in it an error is.

:func:`read_file` gives the file's mapping and where each node starts (:class:`Located`, line
and column, 1-based), refusing a key given twice and substituting ``${VAR}``,
``${VAR:-default}`` (``$${`` is a literal ``${``) in string values; keys are never substituted.
:func:`format_error` turns a pydantic ``ValidationError`` of the root model into one line,
``config clicks.yaml:7:9: window: ...; 9:3: ...``, naming for an unknown key the block it
belongs to (``allowed_lateness: not a top-level key; did you mean window.allowed_lateness?``).

The root model (:class:`tidemark.config.PipelineConfig`) is passed in, never imported: the
file's shape differs from it in one place, the window block (``window: {size, allowed_lateness}``
lands in the model's ``window`` and ``allowed_lateness``; :func:`file_path`).
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from tidemark.config_types import ConfigError

# -- where an error is: the file's line and column, the key's right place ------------------------

Mark = tuple[int, int]
KeyPath = tuple[str | int, ...]


class Located:
    """Where each node of a config file starts (line, column; 1-based): ``values[path]`` a value,
    ``keys[path]`` its key; a path is the keys and list indexes down to the node."""

    def __init__(self) -> None:
        self.values: dict[KeyPath, Mark] = {}
        self.keys: dict[KeyPath, Mark] = {}

    def at(self, path: KeyPath, *, key: bool = False) -> Mark | None:
        """The mark of ``path`` (its key's with ``key``), else of the nearest enclosing node."""
        if key and path in self.keys:
            return self.keys[path]
        for n in range(len(path), -1, -1):
            if path[:n] in self.values:
                return self.values[path[:n]]
        return None


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_submodel, get_args(annotation)) if m is not None), None)


def _places(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str]]:
    """Every key a file may write, with its dotted place: ``("precision", "watermark.precision")``
    (``model`` is the root when ``prefix`` is empty)."""
    out: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        if not prefix and name == "allowed_lateness":  # written in the window block
            out += [("allowed_lateness", "window.allowed_lateness"), ("size", "window.size")]
            continue
        out.append((name, f"{prefix}{name}"))
        sub = _submodel(field.annotation)
        if sub is not None:
            out += _places(sub, f"{prefix}{name}.")
    return out


def _fields_at(path: KeyPath, root: type[BaseModel]) -> list[str]:
    model: type[BaseModel] | None = root
    for key in path:
        field = model.model_fields.get(str(key)) if model else None
        model = _submodel(field.annotation) if field else None
    if model is None:
        return []
    return [name for name in model.model_fields if not (model is root and name == "allowed_lateness")]


def _unknown_key(path: KeyPath, root: type[BaseModel]) -> str:
    """``x.y: unknown key``, saying where the key belongs when it is another block's."""
    dotted = ".".join(map(str, path))
    parent, key = path[:-1], str(path[-1])
    elsewhere = [place for name, place in _places(root) if name == key and place != dotted]
    if elsewhere:
        where = f"not a key of {'.'.join(map(str, parent))}" if parent else "not a top-level key"
        return f"{dotted}: {where}; did you mean {' or '.join(elsewhere)}?"
    close = difflib.get_close_matches(key, _fields_at(parent, root), n=1)
    return f"{dotted}: unknown key" + (f"; did you mean {close[0]}?" if close else "")


def file_path(loc: KeyPath, data: Any) -> KeyPath:
    """A model location as the file writes it: the window block's keys are flattened into the
    model's ``window`` and ``allowed_lateness`` (PipelineConfig._window_block)."""
    block = isinstance(data, dict) and isinstance(data.get("window"), dict)
    if loc[:1] == ("window",) and block:
        return ("window", "size", *loc[1:])
    if loc[:1] == ("allowed_lateness",) and (
        block or not (isinstance(data, dict) and "allowed_lateness" in data)
    ):
        return ("window", "allowed_lateness", *loc[1:])
    return loc


def _absent(path: KeyPath, data: Any) -> bool:
    """Is ``path`` a key its mapping (present in ``data``) lacks?"""
    node = data
    for key in path[:-1]:
        if not _holds(node, key):
            return False
        node = node[key]
    return isinstance(node, dict) and path[-1] not in node


def _union_of(err: Any, held: KeyPath, data: Any) -> bool:
    path = file_path(tuple(err["loc"]), data)
    return len(path) == len(held) + 1 and path[: len(held)] == held


def _holds(node: Any, key: str | int) -> bool:
    return (isinstance(node, dict) and key in node) or (
        isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
    )


def _held(path: KeyPath, data: Any) -> KeyPath:
    """The longest start of ``path`` that ``data`` holds (a union's member names are not keys)."""
    node = data
    for n, key in enumerate(path):
        if not _holds(node, key):
            return path[:n]
        node = node[key]
    return path


def _explain(err: Any, data: Any, located: Located | None, root: type[BaseModel]) -> tuple[str, Mark | None]:
    """One validation error as ``dotted.key: what is wrong`` and where it is in the file."""
    path = file_path(tuple(err["loc"]), data)
    dotted = ".".join(map(str, path))
    msg = str(err["msg"]).removeprefix("Value error, ")
    at = located.at if located else (lambda _path, key=False: None)
    if err["type"] == "extra_forbidden":
        return _unknown_key(path, root), at(path, key=True)
    if err["type"] == "missing":
        return f"{dotted}: required key is missing", at(path[:-1])
    named = re.match(r"^([A-Za-z_][\w.]*): ", msg)
    if named and not path:  # a model check naming its key
        return msg, at(tuple(named.group(1).split(".")), key=True)
    text = f"{dotted}: {msg.removeprefix(dotted + ': ')}" if path else msg
    if (
        named and located and (*path, *named.group(1).split(".")) in located.keys
    ):  # a block's check naming a key
        return text, at((*path, *named.group(1).split(".")), key=True)
    return text, at(path)


def one_line(source: str, found: list[tuple[str, Mark | None]]) -> str:
    """``config f.yaml:7:9: a: ...; 9:3: b: ...`` (with a file), ``config <config>: a: ...; b: ...``."""
    parts = [(f"{m[0]}:{m[1]}: " if m else "") + text for text, m in found]
    head = parts[0]
    if found[0][1]:
        return f"config {source}:{head}" + "".join(f"; {p}" for p in parts[1:])
    return f"config {source}: {head}" + "".join(f"; {p}" for p in parts[1:])


def format_error(
    source: str, exc: ValidationError, root: type[BaseModel], data: Any = None, located: Located | None = None
) -> str:
    """``exc`` (``root``'s validation of ``data``) as one line naming each key and where it is."""
    found: list[tuple[str, Mark | None]] = []
    errors = exc.errors()
    for err in errors:
        path = file_path(tuple(err["loc"]), data)
        if path and err["type"] not in ("missing", "extra_forbidden"):
            if _absent(path, data):
                continue  # not in the mapping: copied from a value that is (log_retention), told there
            held = _held(path, data)
            members = [
                str(file_path(tuple(e["loc"]), data)[len(held)]) for e in errors if _union_of(e, held, data)
            ]
            if held != path and members:  # one value failing every member of a union: one error
                err = {**err, "loc": held, "msg": f"must be one of: {', '.join(members)}", "type": "union"}
                path = held
        if (explained := _explain(err, data, located, root)) not in found:
            found.append(explained)
    return one_line(source, found or [_explain(exc.errors()[0], data, located, root)])


# -- reading a file: marks, duplicate keys, ${VAR} ---------------------------------------------

_ENV_TOKEN = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_EMPTY = "the file is empty (a pipeline config is a mapping: pipeline, source, warehouse, checkpoint, ...)"


def _interpolate(text: str, fail: Any) -> str:
    """``${VAR}``, ``${VAR:-default}`` (unset or empty: the default), ``$${`` a literal ``${``."""

    def value(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        ref = _ENV_REF.fullmatch(match.group(1)) if match.group(1) is not None else None
        if ref is None:
            raise fail(f"{token!r} is not ${{VAR}} or ${{VAR:-default}} (write $${{ for a literal ${{)")
        name, default = ref.groups()
        found = os.environ.get(name)
        if found is None or (found == "" and default is not None):
            if default is None:
                raise fail(f"environment variable {name} is not set (give a default: ${{{name}:-value}})")
            return str(default)
        return found

    return _ENV_TOKEN.sub(value, text)


def _mark(mark: Any) -> Mark:
    return (mark.line + 1, mark.column + 1)


def _walk(source: str, node: yaml.Node, path: KeyPath, located: Located, seen: set[int]) -> None:
    """Record where each node starts, refuse a key given twice, substitute ``${VAR}`` in strings."""
    if id(node) in seen:  # an alias: its anchor's node, done
        return
    seen.add(id(node))
    located.values[path] = _mark(node.start_mark)

    def fail(problem: str, at: Any = node.start_mark, where: KeyPath = path) -> ConfigError:
        line, column = _mark(at)
        return ConfigError(f"config {source}:{line}:{column}: {'.'.join(map(str, where))}: {problem}")

    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value
            if key in first:
                raise fail(f"given twice (first on line {first[key]})", key_node.start_mark, (*path, key))
            first[key] = key_node.start_mark.line + 1
            located.keys[(*path, key)] = _mark(key_node.start_mark)
            _walk(source, value_node, (*path, key), located, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(source, item, (*path, index), located, seen)
    elif node.tag == _STR_TAG and "${" in node.value:
        node.value = _interpolate(node.value, fail)


def _read(source: str, text: str) -> tuple[Any, Located]:
    """The file's mapping and where each node is; ConfigError (one line, with line and column)
    for what is not a config."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise ConfigError(f"config {source}: {_EMPTY}")
        located = Located()
        _walk(source, root, (), located, set())
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"config {source}{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {source}: not valid YAML: {str(exc).splitlines()[0]}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}
        line, column = located.values[()]
        raise ConfigError(
            f"config {source}:{line}:{column}: expected a mapping of keys (pipeline: ..., source: ...), "
            f"got {kind.get(type(data), type(data).__name__)}"
        )
    return data, located


def read_file(path: str | os.PathLike[str]) -> tuple[Any, Located]:
    """A config file's mapping and where each node is; ConfigError (one line) when it is no
    readable, non-empty YAML mapping."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"config {file}: is a directory, not a config file")
    if not file.is_file():
        raise ConfigError(f"config {file}: file not found")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {file}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"config {file}: cannot be read ({exc.strerror})") from None
    if not text.strip():
        raise ConfigError(f"config {file}: {_EMPTY}")
    return _read(str(file), text)
