#!/bin/sh
# Runs once, when the Postgres volume is first initialised (docker-entrypoint-initdb.d):
# leasehold's own database (API keys, repositories, secrets) beside Temporal's, with its own role.
set -eu

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v role="${LEASEHOLD_DB_USER:-leasehold}" -v password="${LEASEHOLD_DB_PASSWORD:-leasehold}" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password';
CREATE DATABASE :"role" OWNER :"role";
SQL
