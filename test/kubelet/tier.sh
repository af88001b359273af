#!/usr/bin/env bash
# `npm run test:kubelet` (scripts/tiers.sh): the kubelet tier (test/kubelet/tier.test.ts). A real
# node in the QEMU guest (kubelet v1.37.2, containerd 2.x, runc, CNI) joined to the k8s tier's
# control plane (with kube-scheduler) on the host; the chart's node DaemonSet as real containers there. Builds or
# finds every binary (scripts/k8s-build.sh, cached under ~/.cache/pve-nfs-csi by version) and the
# node's images (scripts/lib/kubelet-images.sh), prepares the guest (test/vm/prepare.sh), then
# runs the tier. Cold: kubelet ~10 min and containerd several more on 2 shared cores.
# The node plugin's image is not imported into the node: the release tier's registry
# (scripts/lib/registry.sh: distribution over TLS from a test CA) serves the release this tree
# builds (scripts/release.sh: image and chart pushed), the chart is rendered from oci://, and the
# guest's containerd pulls the image through a QEMU guestfwd relay at KUBELET_REGISTRY_GUEST.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
source scripts/lib/containers.sh
source scripts/lib/registry.sh

t0=$SECONDS
ensure_build
ensure_helm
# runc and the CNI plugins the guest's containerd runs (the guest reads the host's /usr);
# iptables for the guest's route to the API server; the VM tier's guest packages.
ensure_apt runc containernetworking-plugins iptables openssl util-linux
bash test/vm/prepare.sh >/dev/null
bash scripts/k8s-build.sh etcd csi-provisioner csi-attacher csi-resizer kube-apiserver kube-controller-manager \
  kube-scheduler kubelet containerd containerd-shim-runc-v2 ctr >/dev/null
bash scripts/lib/kubelet-images.sh pause registrar workload >/dev/null
echo "kubelet-tier: binaries, images and guest ready ($((SECONDS-t0)) s)"

containers_env
work="$(mktemp -d /tmp/pnc-kubelet-release-XXXXXX)"
cleanup() { registry_stop "$work/registry"; rm -rf "$work"; }
trap cleanup EXIT
# The guest side of the relay (test/kubelet/node.ts): the certificate must name it.
export KUBELET_REGISTRY_GUEST_IP=10.0.2.101
t=$SECONDS
REGISTRY_EXTRA_SAN="IP:$KUBELET_REGISTRY_GUEST_IP" registry_start "$work/registry" >/dev/null
source "$work/registry/env"
bash scripts/release.sh --registry "$REGISTRY/pve-nfs-csi" --cert-dir "$REGISTRY_CERT_DIR" \
  --ca-file "$REGISTRY_CA" --out "$work/release" >/dev/null
echo "kubelet-tier: release $(grep ^IMAGE= "$work/release/release.env") pushed to $REGISTRY in $((SECONDS-t)) s"
export RELEASE_REGISTRY_DIR="$work/registry" KUBELET_RELEASE_DIR="$work/release"
npx tap --disable-coverage --timeout 2400 "${@:-test/kubelet/tier.test.ts}"
echo "kubelet-tier: done in $((SECONDS-t0)) s"
