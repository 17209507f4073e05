#!/usr/bin/env bash
# Compile the record parser's JVM fast path (spark_jobs/jvm) into <jars-dir>/tidemark-udf.jar,
# against the Spark jars of the given Python's pyspark. Skipped when the jar is newer than a
# change of its source (a stamp holds the source's hash). Needs a JDK 17 or 21 (javac, jar); the classes target Java 17 and run on both.
#
#   scripts/build_udf.sh [python] [jars-dir]     (defaults: .venv/bin/python .cache/jars)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build_udf: error: $*" >&2; exit 1; }

PYTHON=${1:-.venv/bin/python}
OUT=${2:-.cache/jars}
jar_file=$OUT/tidemark-udf.jar
stamp=$OUT/.tidemark-udf.sha256
sources=$(find spark_jobs/jvm -name '*.java' | sort)
[ -n "$sources" ] || die "no Java sources under spark_jobs/jvm"
# shellcheck disable=SC2086
want=$(cat $sources | sha256sum | cut -d' ' -f1)
if [ -f "$jar_file" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
JAVAC=${JAVA_HOME:+$JAVA_HOME/bin/}javac
JAR=${JAVA_HOME:+$JAVA_HOME/bin/}jar
command -v "$JAVAC" >/dev/null 2>&1 || die "javac not found; the record parser needs a JDK 17 or 21 with javac (apt-get install openjdk-17-jdk-headless) or JAVA_HOME"
spark_jars=$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))') \
  || die "$PYTHON cannot import pyspark"
echo "build_udf: compiling the record parser (spark_jobs/jvm) into $jar_file"
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
mkdir -p "$OUT"
# -path: pyspark's jars name optional manifest Class-Path entries that are not shipped.
# shellcheck disable=SC2086
"$JAVAC" --release 17 -Xlint:all,-path -Werror -d "$classes" -cp "$spark_jars/*" $sources
"$JAR" cf "$jar_file" -C "$classes" .
echo "$want" > "$stamp"
