# Stand-in for maven:3.9.9-eclipse-temurin-17: Debian 12's Maven 3.8 and OpenJDK 17 (mvn on PATH).
ARG BASE=tidemark-standin/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
CMD ["mvn", "--version"]
