"""spark-submit entrypoint for table maintenance: ``spark-submit maintain_job.py --config F``
(``tidemark maintain``: compaction, VACUUM, Delta log checkpoints and cleanup)."""

import sys

from tidemark.cli import main

if __name__ == "__main__":
    sys.exit(main(["maintain", *sys.argv[1:]]))
