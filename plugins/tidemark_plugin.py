"""The plugins-folder registration of the Tidemark view, for a checkout run without installing.

An installed package registers the same plugin through its ``airflow.plugins`` entry point
(``tidemark_airflow.plugin:TidemarkPlugin``); Airflow skips the second registration by name.
"""

from tidemark_airflow.plugin import TidemarkPlugin

__all__ = ["TidemarkPlugin"]
