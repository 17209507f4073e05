# syntax=docker/dockerfile:1
# Spark master and workers: the same pyspark 4.1.3 (Spark's own jars ship inside the wheel) and
# Python 3.11 as the Airflow image that submits the jobs; PySpark refuses executors whose Python
# minor version differs from the driver's, which is why the stock apache/spark image does not fit.
# The Delta/Kafka jars need not be here: spark-submit --jars ships them to the executors.
#
#   master: spark-class org.apache.spark.deploy.master.Master --host spark-master
#   worker: spark-class org.apache.spark.deploy.worker.Worker --cores 1 --memory 1536m spark://spark-master:7077

# The base is a build argument (default: the official image; docker/standins/ for no registry).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# hadolint ignore=DL3006
FROM ${PYTHON_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17

# The executors' Python packages, at exactly the versions requirements.txt pins for the driver
# (as constraints; pip refuses extras there, so lines with [extras] are dropped).
COPY requirements.txt /tmp/requirements.txt
RUN grep -vE '^[[:space:]]*#|\[' /tmp/requirements.txt > /tmp/constraints.txt \
 && pip install --no-cache-dir -c /tmp/constraints.txt \
      pyspark delta-spark pandas pyarrow numpy pyyaml pydantic \
 && rm /tmp/requirements.txt /tmp/constraints.txt

# Same uid as the Airflow containers (50000, group 0), so both can write the shared var volume.
RUN useradd --uid 50000 --gid 0 --create-home --shell /bin/bash spark \
 && mkdir -p /opt/spark-work /opt/tidemark/var \
 && chown -R 50000:0 /opt/spark-work /opt/tidemark
USER 50000
WORKDIR /opt/spark-work
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PATH=/usr/local/lib/python3.11/site-packages/pyspark/bin:$PATH \
    PYSPARK_PYTHON=python3 \
    SPARK_NO_DAEMONIZE=1
