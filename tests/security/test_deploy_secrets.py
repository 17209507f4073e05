"""Finding 5: a deployment with the example's placeholder secrets (or short ones) refuses to start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _example_env() -> dict[str, str]:
    """docker/.env.example as the compose file hands it to the containers."""
    env = {}
    for line in (REPO / "docker" / ".env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    password = env["POSTGRES_PASSWORD"]
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = (
        f"postgresql+psycopg2://airflow:{password}@postgres:5432/airflow"
    )
    return env


def _check(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "POSTGRES"))}
    return subprocess.run(
        [sys.executable, "-m", "tidemark_airflow.deploy_secrets"],
        env={**clean, **env, "PYTHONPATH": str(REPO / "plugins")},
        capture_output=True,
        text=True,
    )


def test_the_examples_placeholders_are_refused_one_line_each():
    done = _check(_example_env())
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    for name in ("JWT_SECRET", "API__SECRET_KEY", "FERNET_KEY", "database password"):
        assert sum(name in line for line in lines) == 1, done.stderr
    assert "change-me" not in done.stderr  # the message names the setting, never echoes a value


def test_strong_secrets_pass_and_a_short_one_does_not():
    from cryptography.fernet import Fernet

    strong = {
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": "k" * 43,
        "AIRFLOW__API__SECRET_KEY": "s" * 43,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://airflow:"
        + "p" * 24
        + "@postgres/airflow",
    }
    assert _check(strong).returncode == 0
    short = _check({**strong, "AIRFLOW__API_AUTH__JWT_SECRET": "short"})
    assert short.returncode == 2 and "JWT_SECRET is 5 characters" in short.stderr


def test_compose_runs_the_check_before_anything_starts():
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.yml").read_text())
    command = " ".join(compose["services"]["airflow-init"]["command"])
    assert command.index("tidemark_airflow.deploy_secrets") < command.index("airflow db migrate")
    for name, service in compose["services"].items():
        if name.startswith("airflow-") and name != "airflow-init":
            assert "airflow-init" in service.get("depends_on", {}), name
