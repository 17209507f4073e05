"""spark-submit entrypoint: ``spark-submit reconcile_job.py --config F --start S --end E``."""

import sys

from tidemark.cli import main

if __name__ == "__main__":
    sys.exit(main(["reconcile", *sys.argv[1:]]))
