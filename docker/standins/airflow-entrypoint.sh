#!/usr/bin/env bash
# The official image's entrypoint contract, reduced: bash/python/an absolute path run as given,
# anything else is an airflow subcommand.
set -e
case "${1:-}" in
  "") exec airflow --help ;;
  bash|python|python3|/*) exec "$@" ;;
  airflow) shift; exec airflow "$@" ;;
  *) exec airflow "$@" ;;
esac
