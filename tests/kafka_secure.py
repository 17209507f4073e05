"""The project's own broker (scripts/kafka.sh) with a SASL_SSL listener: a CA and a broker
certificate made here with openssl, SCRAM-SHA-512 users created over the PLAINTEXT listener
(which the broker keeps for itself and for start's check) and PLAIN users in the listener's JAAS
configuration. Start it once per test module: a broker start is slow on a small machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from brokers import KafkaBroker

SCRAM_USERS = {"tidemark": 'scram-pass-Q3v!9"x\\z', "other": "other-pass-4k2"}
PLAIN_USERS = {"plainuser": "plain-pass-77"}


def make_ca_and_broker_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed CA (``ca.pem``) and the broker's key and certificate for 127.0.0.1 and
    localhost, signed by it, in one PEM file (``broker.pem``: Kafka's PEM keystore)."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=tidemark-test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.rsa.key", "-out", "broker.csr",
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.rsa.key", "-out", "broker.key")
    pem = folder / "broker.pem"
    pem.write_text((folder / "broker.key").read_text() + (folder / "broker.crt").read_text())
    return folder / "ca.pem", pem


class SecureKafkaBroker(KafkaBroker):
    """A :class:`KafkaBroker` with a SASL_SSL listener on ``secure_bootstrap`` (SCRAM-SHA-512 and
    PLAIN); ``bootstrap`` stays the PLAINTEXT one (inter-broker, set-up)."""

    def __init__(self, directory: Path) -> None:
        self.certs = directory.parent / f"{directory.name}-certs"
        self.ca_file, self.keystore = make_ca_and_broker_cert(self.certs)
        super().__init__(directory)

    def _ports(self) -> None:
        from helpers import listen_ports

        port, controller, secure = listen_ports(3)
        plain_jaas = " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items())
        extra = self.certs / "secure.properties"
        extra.write_text(
            "\n".join(
                [
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},"
                    f"SASL_SSL://127.0.0.1:{secure}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secure}",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
                    "inter.broker.listener.name=PLAINTEXT",
                    "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                    "listener.name.sasl_ssl.plain.sasl.jaas.config="
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_jaas};",
                    "ssl.keystore.type=PEM",
                    f"ssl.keystore.location={self.keystore}",
                    "",
                ]
            )
        )
        self.env = {
            **os.environ,
            "TIDEMARK_KAFKA_DIR": str(self.directory),
            "TIDEMARK_KAFKA_PORT": str(port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(controller),
            "TIDEMARK_KAFKA_EXTRA_PROPERTIES": str(extra),
        }
        self.bootstrap = f"127.0.0.1:{port}"
        self.secure_bootstrap = f"127.0.0.1:{secure}"

    def add_scram_users(self, users: dict[str, str]) -> None:
        """SCRAM-SHA-512 credentials, created through the PLAINTEXT listener (KRaft keeps them in
        its metadata log)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(u, info, p.encode()) for u, p in users.items()
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=60)

    def source(self, topic: str, mechanism: str = "SCRAM-SHA-512", user: str = "tidemark", **more) -> dict:
        """A pipeline config's ``source`` block reading ``topic`` through the SASL_SSL listener,
        the password in ``$TIDEMARK_KAFKA_PASSWORD``."""
        return {
            "kind": "kafka",
            "bootstrap_servers": self.secure_bootstrap,
            "topic": topic,
            "path": None,
            "kafka": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": mechanism,
                "username": user,
                "password_env": "TIDEMARK_KAFKA_PASSWORD",
                "ssl_ca_file": str(self.ca_file),
            },
            **more,
        }


def start_secure_broker(directory: Path) -> SecureKafkaBroker:
    broker = SecureKafkaBroker(directory)
    broker.first_start()
    broker.add_scram_users(SCRAM_USERS)
    return broker
