"""Registers the Tidemark view with the Airflow UI (Airflow 3 plugin: a FastAPI app + a nav entry)."""

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin

from tidemark_airflow.view import app


class TidemarkPlugin(AirflowPlugin):
    name = "tidemark"
    fastapi_apps: ClassVar[list] = [{"app": app, "url_prefix": "/tidemark", "name": "Tidemark"}]
    external_views: ClassVar[list] = [
        {
            "name": "Tidemark",
            "href": "/tidemark/",
            "destination": "nav",
            "url_route": "tidemark",
        }
    ]
