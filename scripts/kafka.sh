#!/usr/bin/env bash
# A single Apache Kafka broker in KRaft mode (no ZooKeeper) on loopback, from the jars that
# scripts/setup.sh fetched from Maven Central into .cache/kafka/libs.
#
#   scripts/kafka.sh start|stop|status|restart
#
# TIDEMARK_KAFKA_DIR   data, config, log and pid (default: var/kafka)
# TIDEMARK_KAFKA_PORT  client port on 127.0.0.1 (default 19092)
# TIDEMARK_KAFKA_CONTROLLER_PORT  the KRaft controller's port (default: the client port + 1)
# TIDEMARK_KAFKA_EXTRA_PROPERTIES a file of broker settings appended to server.properties (a key
#                      given again there wins), e.g. a SASL_SSL listener beside the PLAINTEXT one
#                      (tests/kafka_secure.py); the PLAINTEXT listener stays for start's check
# TIDEMARK_KAFKA_JVM_OPTIONS more options for the broker's JVM (after the heap settings), e.g.
#                      the test suite's lighter collector and compiler for a broker that is idle
#                      most of the run
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${TIDEMARK_KAFKA_DIR:-var/kafka}
PORT=${TIDEMARK_KAFKA_PORT:-19092}
CONTROLLER_PORT=${TIDEMARK_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
LIBS="$PWD/.cache/kafka/libs"
PIDFILE="$DIR/broker.pid"
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java

die() { echo "kafka: error: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/pidfile.sh
. "$(dirname "$0")/lib/pidfile.sh"
running() { pidfile_pid "$PIDFILE" >/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

start() {
  [ -d "$LIBS" ] && ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 || die "no broker jars in $LIBS: run scripts/setup.sh"
  if running; then echo "kafka: already running (pid $(pidfile_pid "$PIDFILE")) on 127.0.0.1:$PORT"; return; fi
  mkdir -p "$DIR/data"
  DIR=$(cd "$DIR" && pwd)
  cat > "$DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DIR/data
num.partitions=4
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# Keep records: the batch recompute re-reads topics by offset range.
log.retention.ms=-1
# One node: the controller's no-op record every 500 ms (default) only keeps an idle metadata log
# ticking, for no follower. Without it an idle broker used 1.03 s of CPU a minute, not 1.62 s.
metadata.max.idle.interval.ms=0
PROPS
  if [ -n "${TIDEMARK_KAFKA_EXTRA_PROPERTIES:-}" ]; then
    [ -f "$TIDEMARK_KAFKA_EXTRA_PROPERTIES" ] || die "TIDEMARK_KAFKA_EXTRA_PROPERTIES: $TIDEMARK_KAFKA_EXTRA_PROPERTIES not found"
    { echo "# from $TIDEMARK_KAFKA_EXTRA_PROPERTIES"; cat "$TIDEMARK_KAFKA_EXTRA_PROPERTIES"; } >> "$DIR/server.properties"
  fi
  if [ ! -f "$DIR/data/meta.properties" ]; then
    id=$("$JAVA" -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    "$JAVA" -cp "$LIBS/*" kafka.tools.StorageTool format -t "$id" -c "$DIR/server.properties" >/dev/null
  fi
  # shellcheck disable=SC2086 # the options are words
  nohup "$JAVA" -Xmx512m -Xms256m ${TIDEMARK_KAFKA_JVM_OPTIONS:-} -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties" \
    >"$DIR/broker.log" 2>&1 </dev/null &
  pidfile_write "$PIDFILE" $!
  for _ in $(seq 1 120); do
    if port_open; then echo "kafka: broker up on 127.0.0.1:$PORT (pid $(pidfile_pid "$PIDFILE"), data $DIR)"; return; fi
    running || die "broker exited during start-up; see $DIR/broker.log"
    sleep 0.5
  done
  die "broker did not open 127.0.0.1:$PORT within 60 s; see $DIR/broker.log"
}

stop() {
  if ! pidfile_stop "$PIDFILE" kafka 60 0.5; then echo "kafka: not running"; return; fi
  echo "kafka: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running && port_open; then echo "kafka: running on 127.0.0.1:$PORT (pid $(pidfile_pid "$PIDFILE"))"; else echo "kafka: not running"; exit 3; fi ;;
  *) echo "usage: scripts/kafka.sh start|stop|status|restart" >&2; exit 2 ;;
esac
