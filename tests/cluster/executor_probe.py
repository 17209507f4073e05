"""Run on the cluster (spark-submit, or plain python with ``--master``): ask every executor where
it imports ``tidemark`` from, and whether its Python could import it without what the job
shipped. Prints one line ``PROBE <json list>``; the test judges it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def where(_rows):
    import time

    import tidemark

    time.sleep(0.2)  # keep each task long enough that every executor gets some
    bare = subprocess.run(  # the executor's Python without the shipped archive on its path
        [sys.executable, "-c", "import tidemark"],
        cwd=os.getcwd(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
    )
    yield {
        "tidemark": tidemark.__file__,
        "python": sys.executable,
        "cwd": os.getcwd(),
        "importable_without_archive": bare.returncode == 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", help="cluster URL (ignored under spark-submit)")
    args = parser.parse_args()
    from tidemark.sparkenv import build_session

    spark = build_session(
        app_name="tidemark-executor-probe",
        master=args.master,
        # Start only when every executor has registered, so each of them gets tasks to answer.
        extra_conf={
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        },
    )
    sc = spark.sparkContext
    partitions = 2 * max(sc.defaultParallelism, 2)
    seen = sc.parallelize(range(partitions), partitions).mapPartitions(where).collect()
    print("PROBE " + json.dumps(seen), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
