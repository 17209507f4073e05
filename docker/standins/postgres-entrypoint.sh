#!/bin/bash
# First start: initdb with POSTGRES_USER as superuser (password POSTGRES_PASSWORD), create
# POSTGRES_DB; then run the server listening on all of the container's addresses.
set -euo pipefail
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp); printf '%s' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  db=${POSTGRES_DB:-$user}
  [ "$db" = postgres ] || psql -U "$user" -d postgres -v ON_ERROR_STOP=1 -qc "CREATE DATABASE \"$db\"" >/dev/null
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
[ "${1:-}" = postgres ] && shift
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
