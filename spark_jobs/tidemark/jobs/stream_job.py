"""spark-submit entrypoint for the streaming job:
``spark-submit stream_job.py --config F [--once] [--reset-checkpoint]`` (the `tidemark stream` flags)."""

import sys

from tidemark.cli import main

if __name__ == "__main__":
    sys.exit(main(["stream", *sys.argv[1:]]))
