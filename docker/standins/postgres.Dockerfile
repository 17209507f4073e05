# Stand-in for postgres:15: Debian 12's PostgreSQL 15 with the official image's contract that
# compose uses: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB create the role and database on
# first start, data in /var/lib/postgresql/data, pg_isready on PATH, the server on $PGPORT (5432).
ARG BASE=tidemark-standin/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
# the Debian package's postgres user (a system uid; the official image's is 999)
# hadolint ignore=DL3066
USER postgres
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
