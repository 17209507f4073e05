"""spark-submit entrypoint for the data-quality step:
``spark-submit quality_job.py --config F --start S --end E [--outcome FILE]`` runs the Great
Expectations suites (events with Spark), stores the results, rebuilds the Data Docs and publishes
the reconciliation report (``tidemark report --validate --spark``). Exit 5 when a suite fails."""

import sys

from tidemark.cli import console

if __name__ == "__main__":
    console(["report", "--validate", "--spark", *sys.argv[1:]])
