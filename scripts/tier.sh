#!/usr/bin/env bash
# npm run test:<tier>: one test tier of scripts/tiers.sh (the one list), set up as it needs, then
# its wall time. `scripts/tier.sh --list` prints the list. Extra arguments go to the tier's
# runner (tap for unit and integration: files or --grep).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
source scripts/tiers.sh

usage="usage: scripts/tier.sh $(tier_names | paste -sd '|') [args] | --list"
tier="${1:?$usage}"
shift
if [ "$tier" = --list ]; then
  printf '%-12s %-11s %-74s %s\n' TIER SKIP 'PHASE (npm test)' COMMAND
  for line in "${TIERS[@]}"; do
    tier_fields "$line"
    printf '%-12s %-11s %-74s %s\n' "$TIER" "${SKIP:--}" "$NAME" "$CMD"
  done
  exit 0
fi

t0=$SECONDS
rc=0 found=0
for line in "${TIERS[@]}"; do
  tier_fields "$line"
  [ "$TIER" = "$tier" ] || continue
  found=1
  tier_exec "$CMD" "$@" || { rc=$?; break; }
done
if [ "$found" = 0 ]; then
  echo "scripts/tier.sh: unknown tier \"$tier\" ($usage)" >&2
  rc=2
fi
echo "=== $tier tier: $((SECONDS - t0)) s ($([ "$rc" = 0 ] && echo ok || echo "FAILED, exit $rc"))"
exit "$rc"
