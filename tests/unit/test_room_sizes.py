"""The rooms stay small enough to read: every module of the core and the Airflow side at most
500 lines, every function at most 60 (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = (ROOT / "spark_jobs" / "tidemark", ROOT / "plugins" / "tidemark_airflow")
MODULE_LINES, FUNCTION_LINES = 500, 60


def _sources() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py"))


def test_the_trees_are_found():
    names = {p.name for p in _sources()}
    assert {"batch.py", "batch_input.py", "operators.py"} <= names


def test_every_module_is_at_most_500_lines():
    over = {
        str(p.relative_to(ROOT)): n
        for p in _sources()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MODULE_LINES
    }
    assert not over, f"modules over {MODULE_LINES} lines: {over}"


def test_every_function_is_at_most_60_lines():
    over = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    over[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = length
    assert not over, f"functions over {FUNCTION_LINES} lines: {over}"
