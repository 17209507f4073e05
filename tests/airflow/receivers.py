"""Real local alert receivers: an SMTP server (aiosmtpd) and an HTTP server taking JSON POSTs."""

from __future__ import annotations

import json
import threading
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    from helpers import listen_ports

    return listen_ports(1)[0]


class SmtpReceiver:
    """Collects every message delivered to it, parsed (``email.message.EmailMessage``)."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                msg = message_from_bytes(envelope.content, policy=policy.default)
                receiver.messages.append({"to": list(envelope.rcpt_tos), "message": msg})
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()

    def connection_json(self) -> str:
        return json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": self.port,
                "extra": {"disable_tls": True, "disable_ssl": True, "from_email": "tidemark@example.com"},
            }
        )


class HttpReceiver:
    """Collects the JSON bodies POSTed to it, with their path and headers; answers ``status`` with
    ``body`` (a Slack incoming webhook answers 200 ``ok``)."""

    TOKEN = "receiver-token"  # the connection's password: the HTTP provider's hook sends it as a bearer
    SLACK_PATH = "/services/T0TIDEMARK/B0ALERTS/receiver"  # the incoming webhook's path

    def __init__(self, status: int = 204, body: bytes = b"") -> None:
        self.posts: list[dict] = []
        self.status, self.body = status, body
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.posts.append(
                    {"path": self.path, "json": json.loads(body), "headers": dict(self.headers.items())}
                )
                self.send_response(receiver.status)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)

    def __enter__(self) -> HttpReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def slack_connection_json(self) -> str:
        """A Slack incoming-webhook connection (the Slack provider's ``slackwebhook``) to this
        receiver: the webhook's whole URL in the password, as Slack hands it out."""
        return json.dumps(
            {"conn_type": "slackwebhook", "password": f"http://127.0.0.1:{self.port}{self.SLACK_PATH}"}
        )

    def connection_json(self) -> str:
        return json.dumps(
            {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": self.port,
                "schema": "http",
                "password": self.TOKEN,
            }
        )


class StatsdReceiver:
    """A UDP socket on loopback collecting StatsD lines (``name:value|type``), as a statsd_exporter
    or an agent would receive Airflow's own metrics."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except OSError:  # the timeout, or the socket closed
                continue
            self.lines.extend(data.decode("utf-8", "replace").splitlines())

    def names(self) -> set[str]:
        return {line.split(":", 1)[0] for line in list(self.lines)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
