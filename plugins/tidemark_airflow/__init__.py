"""Tidemark's Airflow side: operators, sensors, triggers, notifiers and the UI view.

DAG files in ``dags/`` only wire these together; the data work lives in ``spark_jobs/tidemark``.
"""

from typing import Any

from tidemark import connections


def _read_connection(conn_id: str) -> dict[str, Any]:
    """An Airflow connection as login, password and extra, for ``storage.airflow_connection`` and
    ``source.kafka.airflow_connection`` (:mod:`tidemark.connections`); Airflow is imported when a
    pipeline needs it."""
    from airflow.sdk import Connection

    conn = Connection.get(conn_id)
    return {"login": conn.login, "password": conn.password, "extra": conn.extra_dejson or {}}


connections.set_connection_reader(_read_connection)
