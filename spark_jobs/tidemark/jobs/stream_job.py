"""spark-submit entrypoint for the streaming job:
``spark-submit stream_job.py --config F [--once] [--reset-checkpoint]`` (the `tidemark stream` flags)."""

import sys

from tidemark.cli import console

if __name__ == "__main__":
    console(["stream", *sys.argv[1:]])
