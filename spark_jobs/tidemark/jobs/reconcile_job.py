"""spark-submit entrypoint: ``spark-submit reconcile_job.py --config F --start S --end E``."""

import sys

from tidemark.cli import console

if __name__ == "__main__":
    console(["reconcile", *sys.argv[1:]])
