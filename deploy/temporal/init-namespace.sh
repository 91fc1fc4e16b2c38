#!/bin/sh
# One-shot (temporalio/admin-tools): create the namespace and register leasehold's search
# attributes (SEARCH_ATTRIBUTES="Name=Type ...", kept equal to workflows/search_attributes.ALL
# by tests/foundation/test_compose.py). Safe to run again.
set -eu

: "${TEMPORAL_ADDRESS:?}" "${NAMESPACE:?}" "${SEARCH_ATTRIBUTES:?}"

attempt=0
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "temporal at $TEMPORAL_ADDRESS is not healthy after 60 attempts" >&2
    exit 1
  fi
  sleep 2
done

if ! temporal operator namespace describe --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" >/dev/null 2>&1; then
  temporal operator namespace create --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" --retention "${RETENTION:-7d}"
fi

# A new namespace reaches the server's namespace cache some seconds after it is created.
attempt=0
until existing="$(temporal operator search-attribute list --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" 2>&1)"; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "namespace $NAMESPACE is not usable after 60 attempts: $existing" >&2
    exit 1
  fi
  sleep 1
done
for spec in $SEARCH_ATTRIBUTES; do
  name="${spec%%=*}"
  type="${spec##*=}"
  if printf '%s\n' "$existing" | grep -qw "$name"; then
    echo "search attribute $name exists"
  else
    temporal operator search-attribute create --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" \
      --name "$name" --type "$type"
  fi
done
echo "namespace $NAMESPACE ready"
