"""Finding: requirements.txt pinned a few of the ~190 installed packages, with no hashes.

requirements.lock (scripts/lock.sh) pins everything requirements-dev.txt resolves to (uv among
them), plus pip, setuptools and wheel, each with its sha256; scripts/setup.sh installs only from it, with
--require-hashes. These checks read files and the running interpreter's installed packages, no
network: the lock is complete and hashed, the environment the tests run in is exactly the lock
(a package installed without locking it fails here), the lock still satisfies the requirements
files, and set-up installs with --require-hashes."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from lockfile import LOCK, logical_lines, read_lock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"


def test_every_locked_requirement_is_pinned_with_a_hash() -> None:
    lock = read_lock()
    assert len(lock) > 150, f"requirements.lock pins only {len(lock)} packages"
    # set-up installs the build tools from the lock before anything else
    assert {"pip", "setuptools", "wheel", "uv"} <= lock.keys()


def test_installed_environment_is_exactly_the_lock() -> None:
    lock = read_lock()
    installed: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        direct_url = dist.read_text("direct_url.json")
        if direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"):
            continue
        installed.setdefault(canonicalize_name(name), dist.version)
    installed.pop("tidemark", None)
    assert len(installed) > 150, f"only {len(installed)} packages found installed"
    unlocked = sorted(f"{n}=={v}" for n, v in installed.items() if n not in lock)
    assert not unlocked, f"installed but not in requirements.lock (run scripts/lock.sh): {unlocked}"
    drifted = sorted(
        f"{n}: installed {v}, locked {lock[n][0]}"
        for n, v in installed.items()
        if Version(v) != Version(lock[n][0])
    )
    assert not drifted, f"installed versions differ from requirements.lock: {drifted}"


def test_lock_satisfies_the_requirements_files() -> None:
    """A pin edited in requirements*.txt without re-running scripts/lock.sh fails here."""
    lock = read_lock()
    stale = []
    for file in ("requirements.txt", "requirements-dev.txt"):
        for line in logical_lines((ROOT / file).read_text()):
            if line.startswith("-"):
                continue
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name not in lock:
                stale.append(f"{file}: {req} is not in the lock")
            elif not req.specifier.contains(lock[name][0], prereleases=True):
                stale.append(f"{file}: {req} but the lock has {lock[name][0]}")
    assert not stale, f"requirements.lock is stale (run scripts/lock.sh): {stale}"


def test_setup_installs_with_require_hashes() -> None:
    script = logical_lines(SETUP.read_text())
    installs = [line for line in script if re.search(r"\bpip install\b", line)]
    assert installs, "scripts/setup.sh runs no pip install"
    for line in installs:
        if re.search(r"\s-e\s+\.(\s|$)", line):
            # the project itself, editable: no hash to check, and it must pull in nothing
            assert "--no-deps" in line, f"the editable install may pull in dependencies: {line}"
            continue
        assert "--require-hashes" in line, f"scripts/setup.sh installs without --require-hashes: {line}"
        # pip resolves dependencies outside hash checking; uv's --require-hashes also checks every
        # dependency it resolves (test_uv_refuses_a_dependency_the_lock_does_not_hash)
        if not re.search(r"\buv pip install\b", line):
            assert "--no-deps" in line, f"scripts/setup.sh installs with pip's dependency resolution: {line}"
        assert "-r requirements.txt" not in line and "-r requirements-dev.txt" not in line, line
    assert any("-r requirements.lock" in line for line in installs), "setup.sh does not install the lock"
    stamp = next(line for line in script if line.startswith("want=$("))
    assert "requirements.lock" in stamp, f"the install stamp ignores requirements.lock: {stamp}"


def test_uv_refuses_a_dependency_the_lock_does_not_hash(tmp_path) -> None:
    """setup.sh lets uv resolve the lock's dependencies (no --no-deps): safe only because uv's
    hash-checking mode refuses any dependency not pinned with a hash in the input. A lock holding
    python-dateutil but not its dependency must fail; the whole lock must pass. Offline: set-up's
    resolution left every locked package's metadata in uv's cache."""
    import subprocess
    import sys

    uv = Path(sys.executable).with_name("uv")
    lock = read_lock()
    version, hashes = lock["python-dateutil"]
    partial = tmp_path / "partial.txt"
    partial.write_text(f"python-dateutil=={version} " + " ".join(hashes) + "\n")

    empty = tmp_path / "venv"  # nothing installed: every dependency must come from the input
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(empty)], check=True)

    def dry_run(requirements: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                str(uv),
                "pip",
                "install",
                "--offline",
                "--dry-run",
                "--python",
                str(empty / "bin" / "python"),
                "--require-hashes",
                "--no-build-isolation",
                "-r",
                str(requirements),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    refused = dry_run(partial)
    assert refused.returncode != 0, f"uv installed a dependency without a hash:\n{refused.stderr}"
    assert "no trusted hash was provided" in refused.stderr, refused.stderr
    whole = dry_run(LOCK)
    assert whole.returncode == 0, f"uv refused requirements.lock:\n{whole.stderr[-2000:]}"
