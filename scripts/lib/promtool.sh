#!/usr/bin/env bash
# ensure_promtool: Prometheus' promtool (its rule unit tests, `promtool test rules`), built with
# `go install` from the pinned module version and cached outside the checkout, keyed by version:
#   ~/.cache/pve-nfs-csi/promtool-<version>/promtool
# Sets PROMTOOL to the binary. Cold, on 2 shared cores, the build takes many minutes (the
# Prometheus module graph is large); warm it is a stat. Sourced after scripts/lib/ensure.sh.

# The Prometheus module's versions are v0.<major><minor>.<patch> (v0.316.0 is Prometheus 3.16.0).
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
PROMTOOL_DIR="${PVE_NFS_CSI_CACHE:-$HOME/.cache/pve-nfs-csi}/promtool-$PROMTOOL_VERSION"
PROMTOOL="$PROMTOOL_DIR/promtool"

ensure_promtool() {
  [[ -x $PROMTOOL ]] && return 0
  command -v go >/dev/null || { echo "promtool $PROMTOOL_VERSION is not cached and there is no Go toolchain to build it" >&2; return 1; }
  mkdir -p "$PROMTOOL_DIR"
  # Two runs at once (two checkouts) build it once: the second waits and uses the first's result.
  local lock; exec {lock}>"$PROMTOOL_DIR/.lock"; flock "$lock"
  if [[ ! -x $PROMTOOL ]]; then
    local t0=$SECONDS tmp="$PROMTOOL_DIR/.gobin"
    echo "building promtool $PROMTOOL_VERSION into $PROMTOOL_DIR (the first build takes many minutes)" >&2
    rm -rf "$tmp"
    if GOBIN="$tmp" CGO_ENABLED=0 nice -n "${PROMTOOL_BUILD_NICE:-10}" \
      go install -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" >&2; then
      mv "$tmp/promtool" "$PROMTOOL"
      echo "built promtool in $((SECONDS - t0)) s" >&2
    fi
    rm -rf "$tmp"
  fi
  exec {lock}>&-
  [[ -x $PROMTOOL ]] || { echo "could not build promtool $PROMTOOL_VERSION" >&2; return 1; }
}
