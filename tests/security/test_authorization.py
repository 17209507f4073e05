"""Finding 6 (authorization): each pipeline's pages are served only to a user the auth manager
lets read that pipeline's reconciliation DAG; reading another pipeline's DAG is not enough. The
view's real routes over FastAPI's test client; the auth manager is a stand-in that answers per DAG
(Airflow's simple auth manager grants all DAGs or none, so it cannot tell the two apart)."""

from __future__ import annotations

import pytest
from helpers import write_config

pytestmark = [pytest.mark.airflow]


class PerDagManager:
    """Allows reading exactly the DAG ids in ``allowed``."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.asked: list[str | None] = []

    def is_authorized_dag(self, *, method, details=None, user=None, access_entity=None) -> bool:
        dag_id = getattr(details, "id", None)
        self.asked.append(dag_id)
        return method == "GET" and dag_id in self.allowed


@pytest.fixture
def two_pipelines(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from tidemark_airflow import view
    from tidemark_airflow.pipelines import Pipeline

    pipelines = []
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        config = write_config(tmp_path / name, name=name)
        quality = tmp_path / name / "warehouse" / name / "_quality"
        quality.mkdir(parents=True)
        (quality / "reconciliation.html").write_text(f"<p>report of {name}</p>")
        pipelines.append(Pipeline(config_path=str(tmp_path / name / f"{name}.yaml"), config=config))
    manager = PerDagManager({view.reconciliation_dag_id("alpha")})
    monkeypatch.setattr(view, "configured_pipelines", lambda: pipelines)
    monkeypatch.setattr(
        view, "_quality_root", lambda p: tmp_path / p.name / "warehouse" / p.name / "_quality"
    )
    import airflow.api_fastapi.app as app_module

    monkeypatch.setattr(app_module, "get_auth_manager", lambda: manager)
    from airflow.api_fastapi.core_api.security import get_user

    for dep in view.app.router.dependencies:
        view.app.dependency_overrides[dep.dependency] = lambda: None
    view.app.dependency_overrides[get_user] = lambda: object()
    yield TestClient(view.app), manager
    view.app.dependency_overrides.clear()


def test_a_user_who_may_read_one_pipeline_sees_only_that_one(two_pipelines):
    client, manager = two_pipelines
    ok = client.get("/reports/alpha/reconciliation.html")
    assert ok.status_code == 200 and "report of alpha" in ok.text
    refused = client.get("/reports/beta/reconciliation.html")
    assert refused.status_code == 404 and "report of beta" not in refused.text
    assert "tidemark_reconciliation__beta" in manager.asked  # asked per pipeline, by its DAG id


def test_the_app_wide_gate_names_no_dag(two_pipelines):
    """The app-wide dependencies check only that the user may use plugin views; a DAG check
    without a DAG id ("any DAG") would let a user of one DAG into every pipeline's routes."""
    from tidemark_airflow import view

    names = [getattr(d.dependency, "__qualname__", "") for d in view.app.router.dependencies]
    assert not any("requires_access_dag" in n for n in names), names
