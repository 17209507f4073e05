"""The Apache Flink peer (PyFlink 2.3, Flink's own jars), as Flink's SQL docs write the job:
a filesystem JSON source with its schema and a bounded-out-of-orderness watermark, first-row
deduplication by ``event_id``, the events and tumbling one-minute counts per key written out.

    .cache/peers-venv/bin/python bench/peers_flink.py LANDING OUT [--parallelism 2] [--delay-s 120]

Runs under the peers' own venv (``scripts/peers_venv.sh``: PyFlink pins its own pyarrow, pandas
and Beam, which do not install beside Tidemark's). Prints one JSON line: the job's wall seconds
(from submit to the end of the bounded input; the mini-cluster's start is reported apart as
``setup_s``), the events and window rows it wrote, and the optimized plan, which shows one
``TableSourceScan`` with the ``json`` format: each line is parsed once.

Sinks: Flink has no Delta sink for 2.x in PyFlink's jars, so both outputs are Flink's own
filesystem sink in JSON (each file committed at the end of the bounded job). Deduplication state
is kept for the whole run (``table.exec.state.ttl`` 1 h), like Tidemark's 24 h horizon and unlike
Spark's ``dropDuplicatesWithinWatermark``, which forgets ids once the watermark passes them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("landing", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--delay-s", type=int, default=120, help="bounded out-of-orderness (s)")
    args = parser.parse_args()

    started = time.monotonic()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("table.exec.state.ttl", "1 h")
    env.execute_sql(
        f"""CREATE TABLE src (
          event_id STRING, host STRING, event_time BIGINT, `key` STRING, `value` DOUBLE,
          heartbeat BOOLEAN,
          ts AS TO_TIMESTAMP_LTZ(event_time, 3),
          pt AS PROCTIME(),
          WATERMARK FOR ts AS ts - INTERVAL '{args.delay_s}' SECOND(3)
        ) WITH ('connector' = 'filesystem', 'path' = 'file://{args.landing}', 'format' = 'json',
          'json.ignore-parse-errors' = 'true',
          'source.path.regex-pattern' = '.*/part-[0-9]+\\.jsonl')"""
    )
    env.execute_sql(
        f"""CREATE TABLE events_out (event_id STRING, host STRING, event_time BIGINT, `key` STRING,
          `value` DOUBLE) WITH ('connector' = 'filesystem', 'path' = 'file://{args.out}/events',
          'format' = 'json')"""
    )
    env.execute_sql(
        f"""CREATE TABLE windows_out (window_start TIMESTAMP(3), `key` STRING, events BIGINT)
          WITH ('connector' = 'filesystem', 'path' = 'file://{args.out}/windows', 'format' = 'json')"""
    )
    env.execute_sql(
        """CREATE TEMPORARY VIEW deduped AS
          SELECT event_id, host, event_time, `key`, `value`, ts FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY pt ASC) AS rn
            FROM src
            WHERE event_id IS NOT NULL AND event_time IS NOT NULL AND NOT COALESCE(heartbeat, FALSE))
          WHERE rn = 1"""
    )
    statements = env.create_statement_set()
    statements.add_insert_sql(
        "INSERT INTO events_out SELECT event_id, host, event_time, `key`, `value` FROM deduped"
    )
    statements.add_insert_sql(
        """INSERT INTO windows_out
          SELECT window_start, `key`, COUNT(*) FROM
            TABLE(TUMBLE(TABLE deduped, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
          GROUP BY window_start, window_end, `key`"""
    )
    plan = statements.explain()
    submitted = time.monotonic()
    statements.execute().wait()
    job_s = time.monotonic() - submitted
    print(
        json.dumps(
            {
                "setup_s": round(submitted - started, 2),
                "job_s": round(job_s, 2),
                "events": _lines(args.out / "events"),
                "windows": _lines(args.out / "windows"),
                "plan": plan,
            }
        )
    )


def _lines(folder: Path) -> int:
    return sum(
        sum(1 for _ in p.open(encoding="utf-8"))
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


if __name__ == "__main__":
    main()
