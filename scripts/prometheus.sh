#!/usr/bin/env bash
# Prometheus and promtool for the metrics tests (tests/spark/test_stream_metrics.py: a real server
# scrapes a running stream's endpoint; promtool checks and unit-tests docker/monitoring/tidemark-alerts.yml),
# installed once into .cache/tools/prometheus/<version>/ (git-ignored); a second run finds them there
# and prints the directory without touching apt, Go or the network.
#
#   scripts/prometheus.sh        -> prints the directory holding prometheus and promtool
#
# TIDEMARK_PROMETHEUS_FROM   debian (default): Debian's `prometheus` package (2.42), downloaded with
#                            apt-get and unpacked with dpkg-deb, nothing installed system-wide and no
#                            service started (seconds);
#                            source: built with the machine's Go through the Go module proxy
#                            (`go install`; tens of minutes on 2 cores)
# TIDEMARK_PROMETHEUS_VERSION  with source: the Go module version (default v0.316.0, Prometheus 3.16.0)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "prometheus: error: $*" >&2; exit 1; }

FROM=${TIDEMARK_PROMETHEUS_FROM:-debian}
ROOT=$PWD/.cache/tools/prometheus
ready() { [ -x "$1/prometheus" ] && [ -x "$1/promtool" ] && "$1/promtool" --version >/dev/null 2>&1; }

case "$FROM" in
  debian)
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; set TIDEMARK_PROMETHEUS_FROM=source to build with Go"
    version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
    [ -n "$version" ] && [ "$version" != "(none)" ] \
      || die "Debian's package index has no prometheus package (run apt-get update, or TIDEMARK_PROMETHEUS_FROM=source)"
    DEST=$ROOT/debian-${version//[^A-Za-z0-9.+-]/_}
    if ready "$DEST"; then echo "$DEST"; exit 0; fi
    echo "prometheus: unpacking Debian's prometheus $version into $DEST" >&2
    mkdir -p "$ROOT"
    tmp=$(mktemp -d "$ROOT/.unpack.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && apt-get download "prometheus=$version" >&2) \
      || die "apt-get download prometheus=$version failed (its errors are above)"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root" || die "dpkg-deb could not unpack the prometheus package"
    mkdir -p "$tmp/bin"
    mv "$tmp/root/usr/bin/prometheus" "$tmp/root/usr/bin/promtool" "$tmp/bin/"
    ;;
  source)
    VERSION=${TIDEMARK_PROMETHEUS_VERSION:-v0.316.0}
    DEST=$ROOT/$VERSION
    if ready "$DEST"; then echo "$DEST"; exit 0; fi
    command -v go >/dev/null 2>&1 || die "go not found; Prometheus $VERSION is built from source with Go"
    echo "prometheus: building prometheus and promtool $VERSION with $(go env GOVERSION) into $DEST (tens of minutes)" >&2
    mkdir -p "$ROOT"
    tmp=$(mktemp -d "$ROOT/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    for cmd in prometheus promtool; do
      GOBIN=$tmp/bin go install "github.com/prometheus/prometheus/cmd/$cmd@$VERSION" >&2 \
        || die "go install github.com/prometheus/prometheus/cmd/$cmd@$VERSION failed (its errors are above)"
    done
    ;;
  *) die "TIDEMARK_PROMETHEUS_FROM=$FROM: use debian or source" ;;
esac
ready "$tmp/bin" || die "the promtool just installed does not run"
rm -rf "$DEST"
mv "$tmp/bin" "$DEST"
echo "$DEST"
