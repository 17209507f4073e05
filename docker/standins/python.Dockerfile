# Stand-in for python:3.11-slim-bookworm: Debian 12's Python 3.11 as a venv at /usr/local, so
# python3, pip and /usr/local/lib/python3.11/site-packages are where the official image has them.
ARG BASE=tidemark-standin/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && python3 -m venv /usr/local \
 && ln -sf python3 /usr/local/bin/python \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt LANG=C.UTF-8
CMD ["python3"]
