"""Refuse to start a deployment whose secrets are placeholders or too short.

``docker/.env.example`` ships ``change-me`` for the PostgreSQL password, the Fernet key, the JWT
secret and the API secret key. Left as they are, anyone who reaches the API server can mint admin
tokens (the JWT secret signs them) or read the connections (the Fernet key encrypts them). The
compose file's ``airflow-init`` runs this first; every other Airflow container waits for it::

    python -m tidemark_airflow.deploy_secrets     # exit 0, or 2 with one line per weak secret
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit

# Values that are examples, not secrets (compared case-insensitively, as the whole value).
PLACEHOLDERS = frozenset(
    {"change-me", "changeme", "change_me", "secret", "password", "admin", "airflow", "example", "xxx", "todo"}
)
MIN_LENGTH = 32  # characters: token_urlsafe(24) or longer
SQL_CONN = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
FERNET = "AIRFLOW__CORE__FERNET_KEY"
STRONG = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY")
HOW = "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def weak_secrets(env: Mapping[str, str]) -> list[str]:
    """One line per secret that is missing, a placeholder or too short (never the value)."""
    problems: list[str] = []

    def check(name: str, value: str | None, min_length: int = MIN_LENGTH) -> None:
        if not value:
            problems.append(f"{name} is not set; {HOW}")
        elif value.strip().lower() in PLACEHOLDERS or "change-me" in value.lower():
            problems.append(f"{name} is a placeholder; {HOW}")
        elif len(value) < min_length:
            problems.append(f"{name} is {len(value)} characters, shorter than {min_length}; {HOW}")

    for name in STRONG:
        check(name, env.get(name))
    fernet = env.get(FERNET)
    before = len(problems)
    check(FERNET, fernet, min_length=44)
    if fernet and len(problems) == before:
        try:
            from cryptography.fernet import Fernet

            Fernet(fernet.encode())
        except Exception:
            problems.append(
                f"{FERNET} is not a Fernet key; generate one with: python3 -c "
                "'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
            )
    url = env.get(SQL_CONN)
    if url and not url.startswith("sqlite"):
        check(f"the database password in {SQL_CONN}", urlsplit(url).password, min_length=16)
    return problems


def main() -> int:
    problems = weak_secrets(os.environ)
    for line in problems:
        print(f"tidemark: refusing to start: {line}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
