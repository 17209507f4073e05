"""``python -m tidemark.cli``: the ``tidemark`` command."""

from tidemark.cli import console

console()
