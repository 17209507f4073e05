#!/usr/bin/env bash
# A Spark standalone cluster on loopback: one master and two small workers, run by pyspark's own
# bin/spark-class from the venv (the same Spark 4.1.3 the jobs use).
#
#   scripts/spark_cluster.sh start|stop|status|restart
#
# start is idempotent: it starts whatever is not running (a killed worker comes back) and waits
# until every worker has registered with the master. Each daemon runs in its own process group
# (its executors and their Python workers too), so stop, or a test, can end one with everything
# it started.
#
# TIDEMARK_SPARK_CLUSTER_DIR      logs, pids, worker dirs (default: var/spark-cluster)
# TIDEMARK_SPARK_MASTER_PORT      master port on 127.0.0.1 (default 7077)
# TIDEMARK_SPARK_MASTER_UI_PORT   master web UI on 127.0.0.1 (default 18080; /json is used here)
# TIDEMARK_SPARK_WORKERS          number of workers (default 2)
# TIDEMARK_SPARK_WORKER_CORES     cores per worker (default 1)
# TIDEMARK_SPARK_WORKER_MEMORY    memory per worker for executors (default 1536m)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${TIDEMARK_SPARK_CLUSTER_DIR:-var/spark-cluster}
PORT=${TIDEMARK_SPARK_MASTER_PORT:-7077}
UI_PORT=${TIDEMARK_SPARK_MASTER_UI_PORT:-18080}
WORKERS=${TIDEMARK_SPARK_WORKERS:-2}
CORES=${TIDEMARK_SPARK_WORKER_CORES:-1}
MEMORY=${TIDEMARK_SPARK_WORKER_MEMORY:-1536m}
PYTHON=$ROOT/.venv/bin/python
URL="spark://127.0.0.1:$PORT"

die() { echo "spark-cluster: error: $*" >&2; exit 1; }
say() { echo "spark-cluster: $*"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
master_at_url() { grep -q "Starting Spark master at $URL\$" "$DIR/master.log" 2>/dev/null && port_open "$PORT"; }

spark_class() {
  [ -x "$PYTHON" ] || die "$PYTHON not found: run scripts/setup.sh"
  local home
  home=$("$PYTHON" -c 'from tidemark.packaging import spark_home; print(spark_home())' 2>/dev/null) \
    || die "pyspark is not installed in .venv: run scripts/setup.sh"
  [ -x "$home/bin/spark-class" ] || die "$home/bin/spark-class not found (pyspark install incomplete)"
  echo "$home/bin/spark-class"
}

check_java() {
  local java=${JAVA_HOME:+$JAVA_HOME/bin/}java
  command -v "$java" >/dev/null 2>&1 || die "java not found; install Java 17 or set JAVA_HOME"
}

# Daemons run with a clean environment for Python (no PYTHONPATH from the caller) from their own
# directory, so executors see only what the application ships.
launch() { # name log class args...
  local name=$1 log=$2
  shift 2
  (
    cd "$DIR"
    unset PYTHONPATH
    export SPARK_LOCAL_IP=127.0.0.1 SPARK_DAEMON_MEMORY=${SPARK_DAEMON_MEMORY:-384m}
    export SPARK_CONF_DIR="$DIR/conf"
    exec setsid "$SPARK_CLASS" "$@" >"$log" 2>&1 </dev/null
  ) &
  echo $! >"$DIR/$name.pid"
}

write_conf() {
  mkdir -p "$DIR/conf"
  cat >"$DIR/conf/spark-defaults.conf" <<CONF
# Written by scripts/spark_cluster.sh; daemons only (applications bring their own settings).
spark.master.rest.enabled false
spark.deploy.spreadOut true
# Declare a silent worker dead after 15 s instead of 60 s.
spark.worker.timeout 15
spark.worker.cleanup.enabled true
spark.worker.cleanup.appDataTtl 86400
# A taken port is an error, not a reason to move to the next one: the master must be at \$URL.
spark.port.maxRetries 0
CONF
}

wait_registered() { # log pid name
  for _ in $(seq 1 240); do
    grep -q "Successfully registered with master" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited during start-up; see $1"
    sleep 0.5
  done
  die "$3 did not register with $URL within 120 s; see $1"
}

start() {
  check_java
  SPARK_CLASS=$(spark_class)
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  write_conf
  if alive "$DIR/master.pid"; then
    say "master already running (pid $(cat "$DIR/master.pid")) at $URL"
  else
    port_open "$PORT" && die "port 127.0.0.1:$PORT is in use by another process (set TIDEMARK_SPARK_MASTER_PORT)"
    port_open "$UI_PORT" && die "port 127.0.0.1:$UI_PORT is in use by another process (set TIDEMARK_SPARK_MASTER_UI_PORT)"
    launch master "$DIR/master.log" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT"
    # The master's own log line, not an open port: another master may hold the port.
    for _ in $(seq 1 240); do
      master_at_url && break
      alive "$DIR/master.pid" || die "master exited during start-up (port $PORT or $UI_PORT taken?); see $DIR/master.log"
      sleep 0.5
    done
    master_at_url || die "master did not start at $URL within 120 s; see $DIR/master.log"
  fi
  local started=()
  for i in $(seq 1 "$WORKERS"); do
    if alive "$DIR/worker-$i.pid"; then say "worker $i already running (pid $(cat "$DIR/worker-$i.pid"))"; continue; fi
    mkdir -p "$DIR/worker-$i/work" "$DIR/worker-$i/local"
    SPARK_LOCAL_DIRS="$DIR/worker-$i/local" launch "worker-$i" "$DIR/worker-$i.log" \
      org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --webui-port 0 \
      --cores "$CORES" --memory "$MEMORY" --work-dir "$DIR/worker-$i/work" "$URL"
    started+=("$i")
  done
  for i in "${started[@]}"; do
    wait_registered "$DIR/worker-$i.log" "$(cat "$DIR/worker-$i.pid")" "worker $i"
    say "worker $i registered (pid $(cat "$DIR/worker-$i.pid"))"
  done
  say "up at $URL: $WORKERS workers x $CORES core, $MEMORY (master UI http://127.0.0.1:$UI_PORT, logs $DIR)"
}

stop_one() { # pidfile name
  local pidfile=$1 pid
  alive "$pidfile" || { rm -f "$pidfile"; return; }
  pid=$(cat "$pidfile")
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null || true # the group: executors and Python workers too
  rm -f "$pidfile"
  say "stopped $2"
}

stop() {
  [ -d "$DIR" ] || { say "not running"; return; }
  for pidfile in "$DIR"/worker-*.pid; do
    [ -e "$pidfile" ] || continue
    stop_one "$pidfile" "$(basename "$pidfile" .pid)"
  done
  stop_one "$DIR/master.pid" master
}

status() {
  alive "$DIR/master.pid" && port_open "$PORT" || { say "not running"; exit 3; }
  local json
  json=$(curl -sf "http://127.0.0.1:$UI_PORT/json/" 2>/dev/null) || { say "master up at $URL, UI not answering"; exit 3; }
  "$PYTHON" - "$WORKERS" "$json" <<'PY'
import json, sys
m = json.loads(sys.argv[2])
alive = [w for w in m["workers"] if w["state"] == "ALIVE"]
apps = ", ".join(a["name"] for a in m.get("activeapps", [])) or "none"
cores = sum(w["cores"] for w in alive)
print(f"spark-cluster: running at {m['url']}: {len(alive)} alive workers ({cores} cores); active apps: {apps}")
sys.exit(0 if len(alive) >= int(sys.argv[1]) else 3)
PY
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  url) echo "$URL" ;;
  *) echo "usage: scripts/spark_cluster.sh start|stop|status|restart|url" >&2; exit 2 ;;
esac
