#!/usr/bin/env bash
# A local PostgreSQL 15 (Debian's) for a production-style Airflow: its own data directory, on
# loopback, with a database `airflow` owned by the role `airflow`, whose password is generated at
# the first start and kept in <dir>/airflow.password (mode 600; var/ is never committed).
#
#   scripts/postgres.sh start|stop|status|url|restart
#   export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=$(scripts/postgres.sh url)
#
# TIDEMARK_POSTGRES_DIR   data, socket, log and password (default: var/postgres)
# TIDEMARK_POSTGRES_PORT  port on 127.0.0.1 (default 15432)
# TIDEMARK_POSTGRES_BIN   server binaries (default /usr/lib/postgresql/15/bin)
#
# PostgreSQL refuses to run as root: as root the server runs as the `postgres` system user (which
# Debian's package creates); otherwise as the caller.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${TIDEMARK_POSTGRES_DIR:-var/postgres}
PORT=${TIDEMARK_POSTGRES_PORT:-15432}
BIN=${TIDEMARK_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}
DB=airflow
ROLE=airflow

die() { echo "postgres: error: $*" >&2; exit 1; }
say() { echo "postgres: $*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

as_owner() { # run a server binary as the user that owns the cluster
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_binaries() {
  [ -x "$BIN/initdb" ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's postgresql"
    (apt-get install -y -q postgresql >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }) \
      || die "apt-get install postgresql failed"
    [ -x "$BIN/initdb" ] || die "postgresql installed but $BIN/initdb is missing (set TIDEMARK_POSTGRES_BIN)"
  else
    die "$BIN/initdb not found: install Debian's postgresql (15) or set TIDEMARK_POSTGRES_BIN"
  fi
}

paths() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  DATA=$DIR/data
  RUN=$DIR/run
  PASSFILE=$DIR/airflow.password
  LOG=$DIR/log/postgres.log
}

running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

psql_admin() {
  as_owner psql -X -q -v ON_ERROR_STOP=1 -h "$RUN" -p "$PORT" -U postgres -d postgres "$@"
}

password() {
  if [ ! -s "$PASSFILE" ]; then
    (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$PASSFILE.tmp" && mv "$PASSFILE.tmp" "$PASSFILE")
  fi
  cat "$PASSFILE"
}

start() {
  ensure_binaries
  paths
  if running; then
    say "already running on 127.0.0.1:$PORT (data $DATA)"
  else
    port_open && die "port 127.0.0.1:$PORT is in use by another process (set TIDEMARK_POSTGRES_PORT)"
    mkdir -p "$DATA" "$RUN" "$DIR/log"
    chmod 700 "$DATA" "$RUN"
    if [ "$(id -u)" = 0 ]; then
      id postgres >/dev/null 2>&1 || die "no 'postgres' system user to run the server as (install Debian's postgresql)"
      chown postgres: "$DATA" "$RUN" "$DIR/log"
      runuser -u postgres -- test -x "$DATA" \
        || die "user postgres cannot reach $DATA: make its parent directories world-executable or set TIDEMARK_POSTGRES_DIR"
    fi
    if [ ! -f "$DATA/PG_VERSION" ]; then
      as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >"$DIR/initdb.log" 2>&1 \
        || die "initdb failed; see $DIR/initdb.log"
    fi
    # Loopback only; the superuser connects through the private socket directory (mode 700).
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $RUN" start >/dev/null \
      || die "server did not start; see $LOG"
  fi
  local pass
  pass=$(password)
  if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
    psql_admin -c "CREATE ROLE $ROLE LOGIN PASSWORD '$pass'"
  else
    psql_admin -c "ALTER ROLE $ROLE PASSWORD '$pass'" # the password file is the source of truth
  fi
  if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
    psql_admin -c "CREATE DATABASE $DB OWNER $ROLE"
  fi
  say "up on 127.0.0.1:$PORT, database $DB, role $ROLE (password in $PASSFILE; data $DATA)"
}

stop() {
  paths
  if ! running; then say "not running"; return; fi
  as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
  say "stopped"
}

status() {
  paths
  if running && "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    say "running on 127.0.0.1:$PORT (data $DATA)"
  else
    say "not running"
    exit 3
  fi
}

url() {
  paths
  [ -s "$PASSFILE" ] || die "no password yet in $PASSFILE: run scripts/postgres.sh start first"
  echo "postgresql+psycopg2://$ROLE:$(cat "$PASSFILE")@127.0.0.1:$PORT/$DB"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  url) url ;;
  *) echo "usage: scripts/postgres.sh start|stop|status|url|restart" >&2; exit 2 ;;
esac
