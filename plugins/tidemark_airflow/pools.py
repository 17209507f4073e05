"""The Airflow pools Tidemark's Spark tasks run in, created or resized from the pipeline configs.

Every Spark task (stream start, recompute, quality) runs in its pipeline's ``airflow.spark_pool``
(default ``spark``), so no more than ``airflow.spark_pool_slots`` Spark jobs submitted by Airflow
run at once on the machine or cluster. Pools are shared by name; a pool asked for by several
pipelines gets the largest size any of them asks for. Airflow does not schedule a task whose pool
does not exist, so run this after ``airflow db migrate`` and whenever a pipeline config changes::

    python -m tidemark_airflow.pools        # `make run` and the docker compose init do it
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidemark_airflow.pipelines import Pipeline, configured_pipelines


def pool_sizes(pipelines: list[Pipeline]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for pipeline in pipelines:
        cfg = pipeline.config.airflow
        sizes[cfg.spark_pool] = max(sizes.get(cfg.spark_pool, 0), cfg.spark_pool_slots)
    return sizes


def sync_pools(
    pipelines: list[Pipeline], airflow: str | None = None, env: dict[str, str] | None = None, echo=print
) -> dict[str, int]:
    """``airflow pools set`` for every pool ``pipelines`` name; returns what was set."""
    airflow = airflow or str(Path(sys.executable).with_name("airflow"))
    sizes = pool_sizes(pipelines)
    for name, slots in sizes.items():
        subprocess.run(
            [airflow, "pools", "set", name, str(slots), "Tidemark Spark jobs (airflow.spark_pool)"],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        echo(f"pools: {name} = {slots} slots")
    return sizes


if __name__ == "__main__":
    sync_pools(configured_pipelines())
