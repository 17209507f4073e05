# syntax=docker/dockerfile:1
# Airflow 3.3 with Java 17, Tidemark's pinned requirements (pyspark 4.1.3, delta-spark, the Spark
# provider) and the project installed, plus the Delta/Kafka jars (and OpenLineage's Spark listener,
# in jars/lineage) baked in, so a task can spark-submit to the cluster without touching the network.
#
#   docker compose -f docker/docker-compose.yml build    (context: the repository root)
#
# The base images are build arguments; the defaults are the official images. A machine with no
# registry builds stand-ins for them from Debian packages (docker/standins/, docker/README.md).
ARG MAVEN_IMAGE=maven:3.9.9-eclipse-temurin-17
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11

# --- the JVM jars, fetched once from Maven Central with the same pom as scripts/setup.sh -------
# hadolint ignore=DL3006
FROM ${MAVEN_IMAGE} AS jars
WORKDIR /build
COPY scripts/jars/pom.xml pom.xml
COPY scripts/lineage/pom.xml lineage.xml
RUN mvn -q -B -f pom.xml \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DoutputDirectory=/build/jars \
 && mvn -q -B -f lineage.xml \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DoutputDirectory=/build/jars/lineage

# --- the Airflow image ---------------------------------------------------------------------------
# hadolint ignore=DL3006
FROM ${AIRFLOW_IMAGE}

USER 0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Debian's JDK 17 takes security updates from the base image's release, so it is not pinned (a
# JDK, not a JRE: set-up compiles the record parser's JVM fast path against the installed pyspark).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless procps \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/tidemark/var /opt/tidemark/pipelines /opt/airflow/auth \
 && chown -R airflow:0 /opt/tidemark /opt/airflow/auth
ENV JAVA_HOME=/usr/lib/jvm/java-17

USER 50000
WORKDIR /opt/tidemark
COPY --chown=airflow:0 requirements.txt pyproject.toml README.md ./
# Installing apache-airflow at the base image's version with the rest keeps pip from moving it.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r requirements.txt
# the whole package (core, jobs, GX suites, Java source, Airflow side, DAG files): see pyproject.toml
COPY --chown=airflow:0 spark_jobs ./spark_jobs
COPY --chown=airflow:0 expectations ./expectations
COPY --chown=airflow:0 plugins ./plugins
COPY --chown=airflow:0 dags ./dags
RUN pip install --no-cache-dir --no-deps . \
 && pip check
COPY --from=jars --chown=airflow:0 /build/jars /opt/tidemark/jars
COPY --chown=airflow:0 scripts/build_udf.sh ./scripts/build_udf.sh
RUN scripts/build_udf.sh python /opt/tidemark/jars

ENV TIDEMARK_HOME=/opt/tidemark \
    TIDEMARK_JARS_DIR=/opt/tidemark/jars \
    TIDEMARK_DIST_DIR=/opt/tidemark/var/dist \
    TIDEMARK_PIPELINES_DIR=/opt/tidemark/pipelines \
    PYSPARK_PYTHON=python3
WORKDIR /opt/airflow
