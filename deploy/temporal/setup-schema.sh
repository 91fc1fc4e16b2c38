#!/bin/sh
# One-shot (temporalio/admin-tools): create or upgrade Temporal's two Postgres databases.
# Every step is idempotent, so this runs on each `docker compose up`, and upgrades the schema
# in place when TEMPORAL_VERSION moves forward.
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
DB_PORT="${DB_PORT:-5432}"
SCHEMA_ROOT=/etc/temporal/schema/postgresql/v12

until nc -z "$POSTGRES_SEEDS" "$DB_PORT"; do
  echo "waiting for postgres at $POSTGRES_SEEDS:$DB_PORT"
  sleep 1
done

for pair in "temporal:temporal" "temporal_visibility:visibility"; do
  db="${pair%%:*}"
  schema="${pair##*:}"
  tool="temporal-sql-tool --plugin postgres12 --ep $POSTGRES_SEEDS -u $POSTGRES_USER -p $DB_PORT --db $db"
  $tool create
  $tool setup-schema -v 0.0
  $tool update-schema -d "$SCHEMA_ROOT/$schema/versioned"
done
echo "temporal schema ready"
