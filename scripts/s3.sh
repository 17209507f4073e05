#!/usr/bin/env bash
# An S3 API server on loopback for the object-storage tests and demo: moto's standalone server
# (PyPI `moto[server]`, pinned in scripts/s3/requirements.txt), in its own virtualenv under
# .cache/s3/venv so that its Flask and boto pins never meet Airflow's. It speaks S3 (ListObjectsV2,
# multipart upload, conditional writes with If-None-Match, which delta-rs's commits use) and keeps
# objects in memory: a stop loses them, which suits tests.
#
#   scripts/s3.sh install|start|stop|status|restart
#
# TIDEMARK_S3_DIR   log and pid (default: var/s3)
# TIDEMARK_S3_PORT  port on 127.0.0.1 (default 19878)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${TIDEMARK_S3_DIR:-var/s3}
PORT=${TIDEMARK_S3_PORT:-19878}
VENV="$PWD/.cache/s3/venv"
PIDFILE="$DIR/server.pid"
PYTHON=${PYTHON:-python3.11}

die() { echo "s3: error: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/pidfile.sh
. "$(dirname "$0")/lib/pidfile.sh"
running() { pidfile_pid "$PIDFILE" >/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

install() {  # needs the network once (make setup-test); start needs none
  want=$(sha256sum scripts/s3/requirements.txt | cut -d' ' -f1)
  [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$want" ] && return
  echo "s3: installing moto's server into $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet -r scripts/s3/requirements.txt
  echo "$want" > "$VENV/.stamp"
}

start() {
  [ -x "$VENV/bin/moto_server" ] || die "no S3 server in $VENV: run scripts/s3.sh install (make setup-test does)"
  if running; then echo "s3: already running (pid $(pidfile_pid "$PIDFILE")) on 127.0.0.1:$PORT"; return; fi
  mkdir -p "$DIR"
  nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$DIR/server.log" 2>&1 </dev/null &
  pidfile_write "$PIDFILE" $!
  for _ in $(seq 1 120); do
    if port_open; then echo "s3: server up on http://127.0.0.1:$PORT (pid $(pidfile_pid "$PIDFILE"))"; return; fi
    running || die "server exited during start-up; see $DIR/server.log"
    sleep 0.25
  done
  die "server did not open 127.0.0.1:$PORT within 30 s; see $DIR/server.log"
}

stop() {
  if ! pidfile_stop "$PIDFILE" s3 40 0.25; then echo "s3: not running"; return; fi
  echo "s3: stopped"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running && port_open; then echo "s3: running on http://127.0.0.1:$PORT (pid $(pidfile_pid "$PIDFILE"))"; else echo "s3: not running"; exit 3; fi ;;
  *) echo "usage: scripts/s3.sh install|start|stop|status|restart" >&2; exit 2 ;;
esac
