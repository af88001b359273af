#!/usr/bin/env bash
# `npm test`: everything the project tests (every phase of scripts/tiers.sh), after installing
# what it needs. Prints the time of each phase and a closing "N passed, N failed" line.
# `scripts/test.sh --dry-run` prints the phases it would run (skip switches applied), runs nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
source scripts/tiers.sh

# The phases to run, in order: every line of TIERS but those whose skip switch is 1.
selected=()
for line in "${TIERS[@]}"; do
  tier_fields "$line"
  [ -n "$SKIP" ] && [ "${!SKIP:-0}" = 1 ] && continue
  selected+=("$line")
done
if [ "${1:-}" = --dry-run ]; then
  for line in "${selected[@]}"; do tier_fields "$line"; echo "=== $NAME"; done
  echo "${#selected[@]} phases"
  exit 0
fi

passed=0; failed=0; failures=()
phase() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@"; then passed=$((passed+1)); echo "=== $name: ok ($((SECONDS-t0)) s)"
  else failed=$((failed+1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS-t0)) s)"; fi
}

t0=$SECONDS
ensure_host_tier libnfs-utils
ensure_sanity
echo "=== setup done ($((SECONDS-t0)) s)"

# The phases of scripts/tiers.sh (the one list), in its order: the cheapest that finds the most
# first (lint, eslint.config.js).
for line in "${selected[@]}"; do
  tier_fields "$line"
  phase "$NAME" tier_exec "$CMD"
done

echo
echo "total time: $((SECONDS-t0)) s"
[ ${#failures[@]} -gt 0 ] && printf 'failed phase: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
