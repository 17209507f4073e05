"""Registers the Tidemark view with the Airflow UI (Airflow 3 plugin: a FastAPI app + a nav entry)."""

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from tidemark_airflow.view import app


class TidemarkPlugin(AirflowPlugin):
    # typed as AirflowPlugin declares them (plain lists the plugins manager reads and edits)
    name = "tidemark"
    fastapi_apps: list[Any] = [{"app": app, "url_prefix": "/tidemark", "name": "Tidemark"}]
    external_views: list[Any] = [
        {
            "name": "Tidemark",
            "href": "/tidemark/",
            "destination": "nav",
            "url_route": "tidemark",
        }
    ]
