#!/usr/bin/env bash
# Regenerates requirements.lock: every package requirements-dev.txt resolves to (it includes
# requirements.txt), plus the build tools pip, setuptools and wheel, each pinned `name==version` with
# the sha256 of all its files on the index. scripts/setup.sh installs only from it, with
# --require-hashes and --no-deps, so a package that is not in the lock is never installed.
#
# When to run it: after editing requirements.txt or requirements-dev.txt (a pin moved, a package
# added or removed), then re-run scripts/setup.sh and commit the lock with the edit.
# tests/security/test_lockfile.py fails while the lock and the .venv disagree.
# Pins already in the lock are kept unless the requirements rule them out; to move them on purpose:
#   scripts/lock.sh --upgrade-package NAME   (one package and what it needs)
#   scripts/lock.sh --upgrade                (everything, to the newest allowed)
# Other arguments go to `uv pip compile` too (e.g. -c constraints.txt). Needs the package index;
# uv, pinned below, is installed into a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "lock: error: $*" >&2; exit 1; }
say() { echo "lock: $*"; }

UV_VERSION=0.13.9
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m venv "$tmp/venv" || die "$PYTHON could not create a virtual environment"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION" \
  || die "could not install uv $UV_VERSION (pip's errors are above)"

say "resolving requirements-dev.txt for CPython 3.11 on x86_64 manylinux_2_28"
# The build tools come in on stdin: they are no dependency of the project, but setup.sh installs
# them first, from the lock, and builds the sdist-only packages (pyspark) against them.
printf 'pip\nsetuptools\nwheel\n' | "$tmp/venv/bin/uv" pip compile --quiet \
  --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command scripts/lock.sh \
  requirements-dev.txt - -o requirements.lock "$@" \
  || die "uv could not resolve requirements-dev.txt (its errors are above)"
say "requirements.lock: $(grep -c '^[A-Za-z0-9]' requirements.lock) packages"
