#!/bin/sh
# One-shot (temporalio/admin-tools): create the namespace and register leasehold's search
# attributes (SEARCH_ATTRIBUTES="Name=Type ...", kept equal to workflows/search_attributes.ALL
# by tests/foundation/test_compose.py). Safe to run again.
set -eu

: "${TEMPORAL_ADDRESS:?}" "${NAMESPACE:?}" "${SEARCH_ATTRIBUTES:?}"

# retry PAUSE WHAT COMMAND...: run COMMAND until it succeeds, at most 60 times PAUSE seconds
# apart; then say "WHAT after 60 attempts" (with what the last listing said) and stop.
retry() {
  pause="$1" what="$2"
  shift 2
  attempt=0
  until "$@"; do
    attempt=$((attempt + 1))
    if [ "$attempt" -ge 60 ]; then
      echo "$what after 60 attempts${existing:+: $existing}" >&2
      exit 1
    fi
    sleep "$pause"
  done
}

healthy() {
  temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1
}

list_attributes() {
  existing="$(temporal operator search-attribute list --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" 2>&1)"
}

retry 2 "temporal at $TEMPORAL_ADDRESS is not healthy" healthy

if ! temporal operator namespace describe --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" >/dev/null 2>&1; then
  temporal operator namespace create --address "$TEMPORAL_ADDRESS" -n "$NAMESPACE" --retention "${RETENTION:-7d}"
fi

# A new namespace reaches the server's namespace cache some seconds after it is created.
retry 1 "namespace $NAMESPACE is not usable" list_attributes
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
