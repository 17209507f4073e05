"""Every Airflow setting the project sets is one Airflow 3.3 knows, under its current name.

Airflow 3 moved options between sections (``[scheduler] min_file_process_interval`` is now
``[dag_processor] min_file_process_interval``); an old name is ignored without an error, so the
setting silently does nothing. The launcher (``make run``), the docker compose services and the
example env file are read as the user starts them.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tidemark_airflow.launcher import Platform

REPO = Path(__file__).resolve().parents[2]
SETTING = re.compile(r"^AIRFLOW__([A-Z0-9_]+?)__([A-Z0-9_]+)$")


def _settings(names) -> set[tuple[str, str]]:
    found = set()
    for name in names:
        match = SETTING.match(name)
        if match:
            found.add((match[1].lower(), match[2].lower()))
    return found


def _compose_names() -> set[str]:
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.yml").read_text(encoding="utf-8"))
    names = set()
    for service in compose["services"].values():
        names |= set((service.get("environment") or {}).keys())
    return names


def _env_example_names() -> set[str]:
    text = (REPO / "docker" / ".env.example").read_text(encoding="utf-8")
    return {line.split("=", 1)[0].lstrip("# ").strip() for line in text.splitlines() if "=" in line}


def test_every_airflow_setting_the_launcher_and_docker_set_is_a_current_airflow_option(tmp_path):
    from airflow.configuration import conf

    known = {
        (section, option)
        for section, spec in conf.configuration_description.items()
        for option in (spec.get("options") or {})
    }
    launcher = _settings(Platform(tmp_path).env())
    docker = _settings(_compose_names() | _env_example_names())
    assert ("dag_processor", "min_file_process_interval") in launcher  # the check sees what is set
    unknown = sorted(f"[{s}] {o}" for s, o in launcher | docker if (s, o) not in known)
    assert unknown == [], f"not Airflow 3.3 options (renamed or removed): {unknown}"
