#!/usr/bin/env bash
# The benchmark peers' venv, .cache/peers-venv: PyFlink 2.3 (Flink's jars inside; runs on the
# Java 17 on PATH), polars and deltalake at bench/peers-requirements.txt's pins. Apart from .venv
# because PyFlink pins its own pyarrow, pandas and Beam. Used by bench/peers.py only.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/peers-venv
if [ ! -x "$venv/bin/python" ]; then
  echo "peers_venv: creating $venv" >&2
  python3.11 -m venv "$venv"
fi
"$venv/bin/pip" install -q -r bench/peers-requirements.txt
"$venv/bin/python" -c 'import pyflink, polars, deltalake' && echo "peers_venv: ready ($venv)" >&2
