"""Structure figures for the code: module sizes, the longest functions, import cycles.

    .venv/bin/python scripts/code_metrics.py [--top 15]

Module sizes are lines per file under spark_jobs/tidemark and plugins/tidemark_airflow; function
length is from its ``def`` to its last line (decorators excluded); cycles are the strongly
connected components of the import graph (grimp, what import-linter uses), module-level and
function-level imports alike.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
TREES = {"tidemark": ROOT / "spark_jobs" / "tidemark", "tidemark_airflow": ROOT / "plugins" / "tidemark_airflow"}


def functions(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    stack = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child.end_lineno - child.lineno + 1
                stack.append((child, name + "."))


def cycles(graph, modules):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(m):
        index[m] = low[m] = counter[0]
        counter[0] += 1
        stack.append(m)
        on.add(m)
        for n in graph.find_modules_directly_imported_by(m):
            if n not in modules:
                continue
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            comp = []
            while True:
                n = stack.pop()
                on.discard(n)
                comp.append(n)
                if n == m:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    sizes, funcs = [], []
    for package, tree in TREES.items():
        for path in sorted(tree.rglob("*.py")):
            rel = f"{package}/{path.relative_to(tree)}"
            sizes.append((len(path.read_text(encoding="utf-8").splitlines()), rel))
            funcs += [(n, f"{rel}:{name}") for name, n in functions(path)]
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"modules: {len(sizes)}, lines: {sum(s for s, _ in sizes)}")
    print("largest modules: " + ", ".join(f"{r} {s}" for s, r in sizes[: args.top]))
    over = [f for f in funcs if f[0] > 50]
    print(f"functions: {len(funcs)}, over 50 lines: {len(over)}")
    print("longest functions: " + ", ".join(f"{r} {n}" for n, r in funcs[: args.top]))
    # Imports under TYPE_CHECKING are annotations, not dependencies at run time.
    graph = grimp.build_graph(
        "tidemark", "tidemark_airflow", include_external_packages=False, exclude_type_checking_imports=True
    )
    found = cycles(graph, graph.modules)
    print(f"import cycles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))


if __name__ == "__main__":
    main()
