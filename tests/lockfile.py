"""requirements.lock read as pins (scripts/lock.sh writes it): the security checks of its form
(tests/security/test_lockfile.py) and the installed-wheel test's constraints read it here."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def logical_lines(text: str) -> list[str]:
    """The file's lines with comments dropped and backslash continuations joined."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            lines.append(line)
    if pending.strip():
        lines.append(pending.strip())
    return lines


def read_lock() -> dict[str, tuple[str, list[str]]]:
    """canonical name -> (pinned version, its --hash options); asserts each entry's form."""
    assert LOCK.is_file(), "requirements.lock is missing: scripts/lock.sh writes it"
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in logical_lines(LOCK.read_text()):
        spec, *options = line.split()
        assert not spec.startswith("-"), f"requirements.lock: an option line, not a pin: {line[:80]}"
        pin = PIN.match(spec)
        assert pin, f"requirements.lock: {spec!r} is not pinned as name==version"
        hashes = [o for o in options if o.startswith("--hash=")]
        assert hashes, f"requirements.lock: {spec} has no --hash=sha256:"
        assert hashes == options, f"requirements.lock: {spec} has options other than hashes: {options}"
        bad = [h for h in hashes if not HASH.match(h)]
        assert not bad, f"requirements.lock: {spec} has hashes that are not sha256: {bad}"
        name = canonicalize_name(pin["name"])
        assert name not in entries, f"requirements.lock: {name} is pinned twice"
        entries[name] = (pin["version"], hashes)
    return entries
