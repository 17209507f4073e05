# Stand-in for apache/airflow:3.3.2-python3.11: what docker/airflow.Dockerfile relies on. The user
# airflow (uid 50000, group 0, home /home/airflow), AIRFLOW_HOME=/opt/airflow, AIRFLOW_VERSION, a
# Python 3.11 environment that user installs into with pip (on PATH), curl for the health checks,
# and an entrypoint that runs `airflow <args>` unless the command is bash or python. Airflow
# itself is not preinstalled: docker/airflow.Dockerfile installs apache-airflow==$AIRFLOW_VERSION.
ARG PYTHON=tidemark-standin/python:3.11
FROM ${PYTHON}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl dumb-init \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow --shell /bin/bash airflow \
 && python3 -m venv /home/airflow/.local \
 && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/plugins \
 && chown -R 50000:0 /home/airflow /opt/airflow
COPY airflow-entrypoint.sh /entrypoint
ENV AIRFLOW_VERSION=3.3.2 AIRFLOW_HOME=/opt/airflow PATH=/home/airflow/.local/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 50000
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
