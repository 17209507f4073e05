"""spark-submit entrypoint for table maintenance: ``spark-submit maintain_job.py --config F``
(``tidemark maintain``: compaction, VACUUM, Delta log checkpoints and cleanup)."""

import sys

from tidemark.cli import console

if __name__ == "__main__":
    console(["maintain", *sys.argv[1:]])
