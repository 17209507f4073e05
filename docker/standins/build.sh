#!/usr/bin/env bash
# Local stand-ins for the official base images, built from Debian packages (mmdebstrap), for a
# machine that reaches no container registry. docker/README.md lists how each differs from the
# image it stands in for. Users with a registry never need this: the Dockerfiles' defaults are the
# official images.
#
#   DOCKER_HOST=unix:///path/docker.sock docker/standins/build.sh [TAG_PREFIX]
#
# Builds (TAG_PREFIX default tidemark-standin):
#   <prefix>/debian:bookworm   the Debian 12 root file system (mmdebstrap, imported)
#   <prefix>/python:3.11       for python:3.11-slim-bookworm
#   <prefix>/airflow:3.3.2     for apache/airflow:3.3.2-python3.11
#   <prefix>/maven:3-jdk17     for maven:3.9.9-eclipse-temurin-17
#   <prefix>/kafka:3.9.1       for apache/kafka:3.9.1
#   <prefix>/postgres:15       for postgres:15
#
# TIDEMARK_STANDINS (space-separated: python airflow maven kafka postgres; default all) builds only
# those (the image tests need python, airflow and maven; the compose deployment kafka and postgres).
set -euo pipefail
cd "$(dirname "$0")"
PREFIX=${1:-tidemark-standin}
MIRROR=${TIDEMARK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "standins: $*" >&2; }
command -v mmdebstrap >/dev/null || { say "error: mmdebstrap is not installed (apt-get install mmdebstrap)"; exit 1; }

if ! docker image inspect "$PREFIX/debian:bookworm" >/dev/null 2>&1; then
  say "debian:bookworm from $MIRROR (mmdebstrap)"
  # This machine's own certificate authorities (an egress proxy's, if any) go in, so pip, apt
  # and Maven inside the builds trust what the host trusts.
  hooks=()
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    hooks+=(--customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"'
            --customize-hook='copy-in /usr/local/share/ca-certificates/. /usr/local/share/ca-certificates'
            --customize-hook='chroot "$1" update-ca-certificates >/dev/null')
  fi
  mmdebstrap --quiet --variant=minbase --include=ca-certificates "${hooks[@]}" bookworm - "$MIRROR" \
    | docker import --change 'CMD ["bash"]' - "$PREFIX/debian:bookworm" >/dev/null
fi

build() {  # name tag
  say "$2"
  docker build --pull=false --network host -q --build-arg "BASE=$PREFIX/debian:bookworm" \
    --build-arg "PYTHON=$PREFIX/python:3.11" --build-arg "MAVEN=$PREFIX/maven:3-jdk17" \
    -f "$1.Dockerfile" -t "$PREFIX/$2" . >/dev/null
}
declare -A TAGS=([python]=python:3.11 [airflow]=airflow:3.3.2 [maven]=maven:3-jdk17 [kafka]=kafka:3.9.1
  [postgres]=postgres:15)
for name in ${TIDEMARK_STANDINS:-python airflow maven kafka postgres}; do
  [ -n "${TAGS[$name]:-}" ] || { say "error: TIDEMARK_STANDINS: unknown stand-in '$name' (python airflow maven kafka postgres)"; exit 2; }
  build "$name" "${TAGS[$name]}"
done
say "done: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep "^$PREFIX/" | tr '\n' ' ')"
