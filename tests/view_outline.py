"""What a person sees of the Tidemark view, read from its HTML with :mod:`html.parser` (no browser):
the visible text, and a normalised *outline* of the page compared with an approved baseline.

The outline is the tree of the page's block elements (tag, id, classes, role; inline elements such
as links and spans are looked through, repeated identical siblings such as table rows or the
reconciled hours' items count once), the headings (``h1``-``h3``, figure captions, summaries;
digits as ``#``, pipeline names as ``{pipeline}``) and the axes of every chart (its axis lines and
which axes carry tick labels). Numbers, times and how many rows there are never enter it, and the
lagging-hosts list is one opaque box (a table when some host lags, a sentence when none does).

The unit test renders the templates with a fixture and the platform's browser test reads the live
page's DOM (elements without a box marked ``data-outline-hidden``): both compare with
``tests/airflow/baselines/tidemark_view.json``. On a mismatch the new outline is written next to
it (``tidemark_view.new.json``) and the test fails with a diff; ``TIDEMARK_UPDATE_BASELINES=1``
approves the new outline instead.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

BASELINES = Path(__file__).resolve().parent / "airflow" / "baselines"
VIEW_BASELINE = BASELINES / "tidemark_view.json"

BLOCK = {
    "body", "main", "header", "footer", "nav", "section", "article", "aside", "div", "p", "pre",
    "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "dl", "dt", "dd", "table", "tr", "th", "td",
    "details", "summary", "figure", "figcaption", "form", "blockquote", "svg",
}  # fmt: skip
TRANSPARENT = {"html", "tbody", "thead", "tfoot"}  # a browser adds tbody; the templates do not
SKIPPED = {"head", "script", "style", "template", "noscript"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
OPAQUE_CLASSES = {"lagging-list"}  # its contents depend on the data
HEADINGS = {"h1", "h2", "h3", "figcaption", "summary"}
INVISIBLE_TEXT = SKIPPED | {"title"}  # an SVG <title> is a tooltip


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return sorted(self.attrs.get("class", "").split())

    @property
    def hidden(self) -> bool:
        return "hidden" in self.attrs or "data-outline-hidden" in self.attrs

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def text(self, skip=lambda n: False) -> str:
        if skip(self):
            return ""
        return "".join(c if isinstance(c, str) else c.text(skip) for c in self.children)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):  # <line .../> in SVG
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def visible_text(html: str | Node) -> str:
    """The page's text as a reader gets it: no scripts, styles, head or tooltips, nothing hidden."""
    root = parse(html) if isinstance(html, str) else html
    return root.text(lambda n: n.tag in INVISIBLE_TEXT or n.hidden)


# markup shown as text: a tag ("<p", "</div") or an entity a browser would have decoded once
# ("< 10 s", a lag histogram bin, is a label, not markup)
MARKUP_AS_TEXT = re.compile(r"</?[a-zA-Z][^<>]*>?|&(?:lt|gt|amp|quot|#\d+|#x[0-9a-f]+);", re.IGNORECASE)


def markup_shown_as_text(text: str) -> list[str]:
    """The lines of visible text that show markup or an escaped entity."""
    return [line.strip() for line in text.splitlines() if MARKUP_AS_TEXT.search(line)]


def _describe(node: Node) -> str:
    text = node.tag
    if node.attrs.get("id"):
        text += "#" + node.attrs["id"]
    text += "".join("." + c for c in node.classes)
    if node.attrs.get("role"):
        text += f"[role={node.attrs['role']}]"
    return text


def _tree(node: Node, depth: int) -> list[str]:
    if node.tag in SKIPPED or node.hidden:
        return []
    if node.tag in BLOCK:
        line = "  " * depth + _describe(node)
        if node.tag == "svg" or OPAQUE_CLASSES & set(node.classes):
            return [line + (" (contents vary with the data)" if node.tag != "svg" else "")]
        return [line, *_children(node, depth + 1)]
    return _children(node, depth)  # inline or transparent: its blocks belong to the parent


def _children(node: Node, depth: int) -> list[str]:
    lines: list[str] = []
    previous: list[str] | None = None
    for child in node.children:
        if not isinstance(child, Node):
            continue
        sub = _tree(child, depth)
        if sub and sub != previous:  # repeated identical siblings count once
            lines += sub
        previous = sub or previous
    return lines


def _in_opaque(root: Node) -> set[int]:
    inside: set[int] = set()
    for n in root.iter():
        if OPAQUE_CLASSES & set(n.classes):
            inside |= {id(m) for m in n.iter()}
    return inside


def outline(html: str) -> dict:
    """The normalised outline of a rendered view page (see the module's docstring)."""
    root = parse(html)
    body = next((n for n in root.iter() if n.tag == "body"), root)
    pipelines = {n.attrs["data-pipeline"] for n in body.iter() if "data-pipeline" in n.attrs}
    opaque = _in_opaque(body)
    headings = set()
    for n in body.iter():
        if n.tag in HEADINGS and id(n) not in opaque and not n.hidden:
            text = " ".join(n.text(lambda m: "legend" in m.classes or m.tag in INVISIBLE_TEXT).split())
            text = "{pipeline}" if text in pipelines else re.sub(r"\d+", "#", text)
            headings.add(f"{n.tag}: {text}")
    axes = {}
    for svg in (n for n in body.iter() if n.tag == "svg" and not n.hidden):
        parts = list(svg.iter())
        axes["svg." + ".".join(svg.classes)] = {
            "axis_lines": sum(1 for n in parts if n.tag == "line" and "axis" in n.classes),
            "ticked": [a for a in ("x", "y") if any(f"{a}-tick" in n.classes for n in parts)],
        }
    return {"tree": _tree(body, 0), "headings": sorted(headings), "axes": dict(sorted(axes.items()))}


def check_against_baseline(found: dict, baseline: Path = VIEW_BASELINE) -> None:
    """Compare an outline with the approved one: on a mismatch write it next to the baseline
    (``<name>.new.json``) and fail with a diff; ``TIDEMARK_UPDATE_BASELINES=1`` approves it."""
    text = json.dumps(found, indent=1, ensure_ascii=False) + "\n"
    candidate = baseline.with_suffix(".new.json")
    if os.environ.get("TIDEMARK_UPDATE_BASELINES") == "1":
        baseline.parent.mkdir(parents=True, exist_ok=True)
        baseline.write_text(text, encoding="utf-8")
        candidate.unlink(missing_ok=True)
        return
    approved = baseline.read_text(encoding="utf-8") if baseline.exists() else ""
    if text == approved:
        return
    candidate.parent.mkdir(parents=True, exist_ok=True)
    candidate.write_text(text, encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            approved.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{baseline.name} (approved)",
            tofile=f"{candidate.name} (this page)",
        )
    )
    raise AssertionError(
        f"the page's outline differs from the approved one ({candidate} written; approve a wanted "
        f"change with TIDEMARK_UPDATE_BASELINES=1):\n{diff}"
    )
