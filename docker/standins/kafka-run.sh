#!/bin/bash
# KAFKA_FOO_BAR=x -> foo.bar=x (the official image's rule for its KAFKA_* variables), then format
# the KRaft storage once and run the broker in the foreground.
set -euo pipefail
props=/opt/kafka/config/server.properties
: > "$props"
while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_*) continue ;;
    KAFKA_*) key=${name#KAFKA_}; key=${key,,}; echo "${key//_/.}=$value" >> "$props" ;;
  esac
done < <(env)
dirs=$(sed -n 's/^log\.dirs=//p' "$props"); dirs=${dirs:-/tmp/kraft-combined-logs}
if [ ! -f "${dirs%%,*}/meta.properties" ]; then
  java -cp "/opt/kafka/libs/*" kafka.tools.StorageTool format -t "${CLUSTER_ID:-4L6g3nShT-eMCtK--X86sw}" -c "$props"
fi
exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m} -cp "/opt/kafka/libs/*" kafka.Kafka "$props"
