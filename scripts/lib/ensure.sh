#!/usr/bin/env bash
# Installs what the project's scripts need on a fresh Debian 12 machine, idempotently.
# Sourced by scripts/*.sh; every function is cheap when its work is already done.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$ROOT/.tools"
SANITY_VERSION="${SANITY_VERSION:-v5.5.0}"
_apt_updated=0

# ensure_apt PKG...: installs the Debian packages that are missing.
ensure_apt() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}" >&2
  if [ "$_apt_updated" = 0 ]; then apt-get update -qq >&2; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

ensure_node_modules() {
  if [ ! -x "$ROOT/node_modules/.bin/tsx" ] || [ "$ROOT/package-lock.json" -nt "$ROOT/node_modules/.package-lock.json" ]; then
    echo "installing npm packages" >&2
    (cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
}

ensure_build() {
  ensure_node_modules
  (cd "$ROOT" && npx tsc -p tsconfig.json >&2)
}

# csi-sanity from kubernetes-csi/csi-test, built with `go install` into .tools/.
ensure_sanity() {
  local bin="$TOOLS/csi-sanity" stamp="$TOOLS/csi-sanity.version"
  if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$SANITY_VERSION" ]; then return 0; fi
  mkdir -p "$TOOLS"
  echo "building csi-sanity $SANITY_VERSION" >&2
  if ! GOBIN="$TOOLS" go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$SANITY_VERSION" >&2; then
    SANITY_VERSION=v5.4.0
    GOBIN="$TOOLS" go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$SANITY_VERSION" >&2
  fi
  echo "$SANITY_VERSION" > "$stamp"
}

# Host tools the node plugin and the tests use for real (loop devices, mkfs, mounts).
ensure_host_tools() {
  ensure_apt e2fsprogs xfsprogs util-linux mount openssl python3
}
