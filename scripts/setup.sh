#!/usr/bin/env bash
# One-time set-up: Python 3.11 venv with the pinned requirements, Java 17 or 21 check, JVM jars cached
# under .cache/jars (from Maven Central through the machine's Maven) beside the record parser's
# fast path, compiled here with the JDK's javac (scripts/build_udf.sh). Re-running is cheap: each
# step is skipped when its inputs have not changed. After it, jobs and tests need no network.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "setup: error: $*" >&2; exit 1; }
say() { echo "setup: $*"; }
# mvn_fetch POM DIR [ARGS...]: copy POM's dependencies into DIR once; on failure show Maven's errors
# (-q prints only those) and stop with one line naming the POM.
mvn_fetch() {
  local pom=$1 dir=$2; shift 2
  command -v mvn >/dev/null 2>&1 || die "mvn not found; it fetches the jars of $pom once (apt-get install maven)"
  mvn -q -B -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DoutputDirectory="$dir" "$@" >&2 || die "Maven could not fetch the jars of $pom (its errors are above)"
}

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; Tidemark needs Python 3.11 (set PYTHON=/path/to/python3.11)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); Tidemark needs Python 3.11"
"$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 \
  || die "$PYTHON cannot create virtual environments; install python3.11-venv (apt-get install python3.11-venv)"

# --test-tools: also the Debian packages the tests drive (make test); make demo and make run do not
# need them.
# --s3: also the jars Spark needs for s3a:// locations (hadoop-aws and the 640 MB AWS SDK bundle);
# --test-tools implies it and installs the S3 API server the object-storage tests start.
TEST_TOOLS=0
S3=0
for arg in "$@"; do
  case "$arg" in
    --test-tools) TEST_TOOLS=1; S3=1 ;;
    --s3) S3=1 ;;
    *) die "unknown option $arg (--test-tools, --s3)" ;;
  esac
done

JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
command -v "$JAVA" >/dev/null 2>&1 || die "java not found; install Java 17 or 21 (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
java_version=$("$JAVA" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
case "${java_version%%.*}" in
  17|21) ;;
  *) die "java is version ${java_version:-unknown}; Spark 4.1 runs on Java 17 or 21 (set JAVA_HOME to a JDK 17 or 21)" ;;
esac
say "java $java_version (${JAVA_HOME:-java on PATH})"

# Debian packages the tests drive, installed only for the tests (--test-tools), when missing and
# only as root with apt: headless Chromium (UI and report screenshots) and docker-compose (v1; it
# validates docker/docker-compose.yml against the Compose specification without a Docker engine).
apt_install() {  # package, the file it provides, what for
  [ -x "$2" ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's $1 ($3)"
    (apt-get install -y -q "$1" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "$1" >/dev/null; }) \
      || die "apt-get install $1 failed; $3 need $2"
  else
    die "$2 not found; install Debian's $1 package ($3 need it)"
  fi
}
if [ "$TEST_TOOLS" = 1 ]; then
  apt_install chromium /usr/bin/chromium "browser tests"
  apt_install docker-compose /usr/bin/docker-compose "the compose file's validation tests"
  apt_install patchelf /usr/bin/patchelf "the Java 21 tests (scripts/java21.sh)"
  # the image builds (tests/deploy): a Docker engine the tests start themselves on loopback, and
  # mmdebstrap for the stand-in base images (no container registry is needed)
  apt_install docker.io /usr/sbin/dockerd "the image builds (tests/deploy)"
  apt_install mmdebstrap /usr/bin/mmdebstrap "the stand-in base images (tests/deploy)"
fi

if [ ! -x .venv/bin/python ]; then
  say "creating virtual environment .venv"
  "$PYTHON" -m venv .venv
fi
# Everything comes from requirements.lock (scripts/lock.sh writes it from requirements-dev.txt):
# each package pinned with its sha256 and installed with --require-hashes, so nothing unpinned or
# unhashed gets in. pip installs the build tools and uv first, from the same lock and with
# --no-deps; uv installs the rest (about 4x faster than pip here), compiling their bytecode as pip
# does (uv does not by default; see the project's bytecode below). Its --require-hashes checks
# every dependency too: a package the lock does not pin with a hash fails the install, and the
# resolution leaves each package it installed in uv's cache (the build tools are added after
# `pip check` below), from which tests install the built wheel offline
# (tests/cluster/test_installed.py). The sdist-only packages (pyspark,
# pyspark-client) and the project are built against the locked setuptools without build isolation,
# which would fetch setuptools unpinned and unhashed. The project itself (editable) has no hash.
[ -f requirements.lock ] || die "requirements.lock not found; scripts/lock.sh writes it"
# lock_entries NAME...: those packages' entries in requirements.lock (the pin and its --hash lines)
lock_entries() {
  awk -v want=" $* " '/^[^ #]/ { split($1, p, "=="); keep = index(want, " " p[1] " ") > 0 }
    keep && !/^ *#/' requirements.lock
}
stamp=.venv/.tidemark-requirements.sha256
# (the words: a venv set up before the install compiled bytecode, or before the whole lock was
# resolved against an empty interpreter, is set up again)
want=$({ cat requirements.lock requirements.txt requirements-dev.txt pyproject.toml; echo bytecode resolved; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the locked requirements (a minute or two the first time)"
  [ "$(lock_entries pip setuptools wheel uv | grep -c '==')" = 4 ] \
    || die "requirements.lock lacks pip, setuptools, wheel or uv; re-run scripts/lock.sh"
  .venv/bin/pip install --quiet --require-hashes --no-deps -r <(lock_entries pip setuptools wheel uv) \
    || die "could not install the locked pip, setuptools, wheel and uv (pip's errors are above)"
  .venv/bin/uv pip install --quiet --python .venv/bin/python --require-hashes --no-build-isolation \
    --compile-bytecode -r requirements.lock \
    || die "could not install requirements.lock (uv's errors are above; after editing requirements*.txt run scripts/lock.sh)"
  .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps --no-build-isolation -e . \
    || die "could not install the project (uv's errors are above)"
  .venv/bin/pip check || die "pip check found broken requirements (above); re-run scripts/lock.sh"
  # uv skipped the build tools and itself above (pip had installed them), so its cache lacks
  # them: a throwaway install of the four puts their wheels there (an isolated build, such as the
  # installed-wheel test's of pyspark's sdist, takes setuptools from it offline), and a resolution
  # of the whole lock against an empty interpreter their metadata (the offline hash-mode checks of
  # tests/security/test_lockfile.py find every pinned package).
  scratch=$(mktemp -d)
  { .venv/bin/uv pip install --quiet --target "$scratch/tools" --require-hashes --no-deps \
      -r <(lock_entries pip setuptools wheel uv) \
    && "$PYTHON" -m venv --without-pip "$scratch/venv" \
    && .venv/bin/uv pip install --quiet --dry-run --python "$scratch/venv/bin/python" --require-hashes \
      --no-build-isolation -r requirements.lock; } \
    || { rm -rf "$scratch"; die "uv could not cache the build tools or resolve requirements.lock (uv's errors are above)"; }
  rm -rf "$scratch"
  echo "$want" > "$stamp"
else
  say "requirements up to date"
fi
# Bytecode for the project's own code (an editable install: uv compiles none of it). Python reads
# a module's .pyc whenever it is current and compiles the source in memory otherwise; where
# PYTHONDONTWRITEBYTECODE is set (as on this machine) it never writes one, so every process
# would compile every module it imports, each time (importing Airflow and the operators: 5.2 CPU-s
# without bytecode, 2.3 with).
# compileall skips what is current, so this is cheap after the first time.
.venv/bin/python -m compileall -q -j 0 spark_jobs plugins dags tests bench >/dev/null \
  || die "could not compile the project's Python files (python -m compileall above)"

# The second Java the tests run Spark on (tests/spark/test_java_versions.py): Debian's OpenJDK 21
# unpacked under .cache/java21 with its own glibc (scripts/java21.sh says why and how).
if [ "$TEST_TOOLS" = 1 ]; then
  scripts/java21.sh >/dev/null
  # Prometheus and promtool for the metrics tests, once under .cache/tools/prometheus
  # (scripts/prometheus.sh says from where).
  scripts/prometheus.sh >/dev/null
fi

# The venv's jar cache (tidemark.resources.jars_dir: <venv>/share/tidemark/jars) is the checkout's
# .cache/jars, which survives a rebuilt venv.
mkdir -p .cache/jars .venv/share/tidemark
ln -sfn "$PWD/.cache/jars" .venv/share/tidemark/jars
# The record parser's JVM fast path (spark_jobs/jvm), compiled against the installed pyspark.
scripts/build_udf.sh .venv/bin/python .cache/jars
# every jar scripts/jars/pom.xml lists, at its version (a cache of an older list is fetched again
# and the versions it superseded are removed: scripts/jars/check.py)
if ! .venv/bin/python scripts/jars/check.py scripts/jars/pom.xml .cache/jars >/dev/null \
  || ! .venv/bin/python -c 'from tidemark.sparkenv import cached_jars; cached_jars()' 2>/dev/null; then
  say "fetching JVM jars into .cache/jars"
  mvn_fetch scripts/jars/pom.xml "$PWD/.cache/jars"
fi
.venv/bin/python scripts/jars/check.py scripts/jars/pom.xml .cache/jars --prune | sed 's/^/setup: /'
# OpenLineage's Spark listener (43 MB), on a job's class path only when its pipeline asks for it
# (tidemark.lineage): a directory of its own, so the driver's class archive stays keyed to the rest
if ! .venv/bin/python scripts/jars/check.py scripts/lineage/pom.xml .cache/jars/lineage >/dev/null 2>&1; then
  say "fetching the OpenLineage Spark listener into .cache/jars/lineage"
  mkdir -p .cache/jars/lineage
  mvn_fetch scripts/lineage/pom.xml "$PWD/.cache/jars/lineage"
fi
.venv/bin/python scripts/jars/check.py scripts/lineage/pom.xml .cache/jars/lineage --prune | sed 's/^/setup: /'
if ! ls .cache/kafka/libs/kafka_2.13-*.jar >/dev/null 2>&1; then
  say "fetching the Kafka broker (KRaft) into .cache/kafka/libs"
  mvn_fetch scripts/kafka/pom.xml "$PWD/.cache/kafka/libs" -DincludeScope=runtime
fi
s3_jars_cached() {
  ls .cache/jars/s3/hadoop-aws-*.jar .cache/jars/s3/bundle-*.jar .cache/jars/s3/analyticsaccelerator-s3-*.jar
}
if [ "$S3" = 1 ] && ! s3_jars_cached >/dev/null 2>&1; then
  say "fetching hadoop-aws and the AWS SDK bundle (640 MB) into .cache/jars/s3"
  # through a Maven repository of its own, deleted after: ~/.m2 need not keep a second 640 MB copy
  s3_repo=$(mktemp -d)
  mvn_fetch scripts/s3/pom.xml "$PWD/.cache/jars/s3" -Dmaven.repo.local="$s3_repo"
  rm -rf "$s3_repo"
fi
if [ "$TEST_TOOLS" = 1 ]; then
  scripts/s3.sh install
fi
.venv/bin/python -c 'from tidemark.sparkenv import cached_jars; print("setup: jars:", " ".join(j.name for j in cached_jars()))'
# The driver JVM's class archive (tidemark.jvmarchive): trained once per Java and pyspark (~1 min),
# then every job's JVM starts ~3 s sooner. TIDEMARK_JVM_ARCHIVE=off skips it.
if [ "${TIDEMARK_JVM_ARCHIVE:-}" != off ]; then
  .venv/bin/tidemark jvm-archive | sed 's/^/setup: /'
fi
say "ready"
