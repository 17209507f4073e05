"""Which test files exercise each room: a module is mapped to every test file that imports it (or
names it in a string: ``python -m tidemark.cli``, a ``monkeypatch`` target).

    .venv/bin/python scripts/test_map.py            # the markdown table
    .venv/bin/python scripts/test_map.py --check    # exit 1 when docs/architecture.md's copy is stale

docs/architecture.md carries the table between ``<!-- test-map -->`` markers; tests/unit/test_docs.py
runs ``--check``. "reached through the rooms above it" means no test imports the room itself
(a command, a job or a room above calls it).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = (
    ("tidemark", ROOT / "spark_jobs" / "tidemark"),
    ("tidemark_airflow", ROOT / "plugins" / "tidemark_airflow"),
)
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- test-map -->", "<!-- /test-map -->"
_FROM = re.compile(
    r"^\s*from\s+([\w.]+)\s+import\s+(\(?[^\n]*(?:\n(?!\s*(?:from|import|def|class|@|$))[^\n]*)*)", re.M
)
_IMPORT = re.compile(r"^\s*import\s+([\w.]+)", re.M)
_NAMED = re.compile(r"""["']((?:tidemark|tidemark_airflow)\.[\w.]+)["']""")


def modules() -> list[str]:
    found = []
    for package, base in TREES:
        for path in sorted(base.rglob("*.py")):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def names_in(source: str) -> set[str]:
    names: set[str] = set()
    for match in _FROM.finditer(source):
        names.add(match.group(1))
        names.update(f"{match.group(1)}.{n}" for n in re.findall(r"\w+", match.group(2)))
    names.update(m.group(1) for m in _IMPORT.finditer(source))
    for m in _NAMED.finditer(source):
        parts = m.group(1).split(".")
        names.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return names


def table() -> str:
    rooms = modules()
    uses: dict[str, set[str]] = defaultdict(set)
    for test in sorted((ROOT / "tests").rglob("*.py")):
        names = names_in(test.read_text(encoding="utf-8", errors="replace"))
        for room in rooms:
            if room in names:
                uses[room].add(str(test.relative_to(ROOT / "tests")))
    lines = ["| room | tests |", "|---|---|"]
    for room in rooms:
        tests = sorted(uses[room])
        shown = ", ".join(f"`{t}`" for t in tests[:6]) + (
            f" and {len(tests) - 6} more" if len(tests) > 6 else ""
        )
        lines.append(f"| `{room}` | {shown or 'reached through the rooms above it'} |")
    return "\n".join(lines)


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    current = text.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in text else ""
    if "--check" in sys.argv[1:]:
        if current != table():
            print(
                f"{DOC.relative_to(ROOT)}: the test map is stale; run scripts/test_map.py --write",
                file=sys.stderr,
            )
            return 1
        return 0
    if "--write" in sys.argv[1:]:
        head, _, rest = text.partition(BEGIN)
        tail = rest.partition(END)[2] if rest else "\n"
        DOC.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}", encoding="utf-8")
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
