#!/usr/bin/env bash
# The test tools as containers (`npm test` runs one phase per driver; the CI workflows use the
# same images, built by this script):
#   localhost/csi-sanity:<version>       csi-sanity built from its Go module (CGO_ENABLED=0, a
#                                        static binary) on an empty base (image/csi-sanity)
#   localhost/pve-nfs-csi-nfs-server     nfs-ganesha from Debian on debian:bookworm-slim
#                                        (image/nfs-server)
#
#   scripts/test-images.sh build      builds both (warm: seconds; the layers are cached)
#   scripts/test-images.sh proxmox    + csi-sanity from its image against the Proxmox driver
#   scripts/test-images.sh nfs        + csi-sanity from its image against the NFS driver served
#                                     by the NFS server image
# The driver runs on the host as in the host sanity phases (test/sanity/sanity.sh); only the tools
# are containers: CSI_SANITY and GANESHA_NFSD point test/sanity/sanity.sh at the podman wrappers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
source scripts/lib/containers.sh

what="${1:?usage: scripts/test-images.sh build|proxmox|nfs}"
containers_env
ensure_sanity
export CSI_SANITY_IMAGE="localhost/csi-sanity:$SANITY_VERSION"
export NFS_SERVER_IMAGE="localhost/pve-nfs-csi-nfs-server:bookworm"

t=$SECONDS
# The static binary, cached by version outside the checkout (the host tier's .tools/csi-sanity
# may link libc: the image has none).
static="$CACHE/csi-sanity-$SANITY_VERSION-static/csi-sanity"
if [ ! -x "$static" ]; then
  mkdir -p "${static%/*}"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="${static%/*}" nice -n 10 \
    go install -ldflags "-s -w" "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$SANITY_VERSION" >&2
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$static" image/csi-sanity/Containerfile "$ctx/"
buildah bud --quiet --pull=never --isolation=chroot --layers --build-arg "SANITY_VERSION=$SANITY_VERSION" \
  -f "$ctx/Containerfile" -t "$CSI_SANITY_IMAGE" "$ctx" >/dev/null
containers_debian bookworm
buildah bud --quiet --pull=never --isolation=chroot --network=host --layers \
  -f image/nfs-server/Containerfile -t "$NFS_SERVER_IMAGE" image/nfs-server >/dev/null
echo "test-images: $CSI_SANITY_IMAGE and $NFS_SERVER_IMAGE ready in $((SECONDS-t)) s" >&2

export CSI_SANITY="$PWD/image/csi-sanity/csi-sanity-podman.sh"
case "$what" in
  build) ;;
  proxmox) bash test/sanity/sanity.sh proxmox ;;
  nfs) GANESHA_NFSD="$PWD/image/nfs-server/ganesha-podman.sh" bash test/sanity/sanity.sh nfs ;;
  *) echo "test-images: unknown argument $what" >&2; exit 2 ;;
esac
