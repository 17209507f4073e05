# Stand-in for apache/kafka:3.9.1: the 3.9.1 jars from Maven Central under /opt/kafka/libs, the two
# scripts the compose file calls (/opt/kafka/bin/kafka-topics.sh, kafka-broker-api-versions.sh),
# and a start script that turns KAFKA_* variables into server.properties as the official image
# does (KAFKA_LOG_DIRS -> log.dirs) and formats the KRaft storage on first start.
ARG MAVEN=tidemark-standin/maven:3-jdk17
ARG BASE=tidemark-standin/debian:bookworm
# hadolint ignore=DL3006
FROM ${MAVEN} AS jars
WORKDIR /build
COPY kafka-pom.xml pom.xml
RUN mvn -q -B -f pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=/build/libs

# hadolint ignore=DL3006
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --gid 0 --create-home appuser \
 && mkdir -p /opt/kafka/bin /var/lib/kafka/data /opt/kafka/config \
 && chown -R 1000:0 /var/lib/kafka /opt/kafka/config
COPY --from=jars /build/libs /opt/kafka/libs
COPY kafka-run.sh /opt/kafka/bin/run.sh
RUN printf '#!/bin/sh\nexec java -Xmx256m -cp "/opt/kafka/libs/*" org.apache.kafka.tools.TopicCommand "$@"\n' \
      > /opt/kafka/bin/kafka-topics.sh \
 && printf '#!/bin/sh\nexec java -Xmx256m -cp "/opt/kafka/libs/*" kafka.admin.BrokerApiVersionsCommand "$@"\n' \
      > /opt/kafka/bin/kafka-broker-api-versions.sh \
 && chmod 755 /opt/kafka/bin/*.sh
USER 1000
CMD ["/opt/kafka/bin/run.sh"]
