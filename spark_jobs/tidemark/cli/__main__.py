"""``python -m tidemark.cli``: the ``tidemark`` command."""

import sys

from tidemark.cli import main

sys.exit(main())
