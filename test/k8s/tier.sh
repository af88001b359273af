#!/usr/bin/env bash
# `npm run k8s`: the k8s tier (test/k8s/tier.test.ts). Builds or finds the Kubernetes binaries
# (scripts/k8s-build.sh; cold: tens of minutes, cached under ~/.cache/pve-nfs-csi), helm, the
# program, then runs the tier against a control plane it starts and stops itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh

t0=$SECONDS
ensure_build
ensure_helm
ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils openssl util-linux
# kube-scheduler places every pod (WaitForFirstConsumer, CSIStorageCapacity, topology).
components=(etcd csi-provisioner csi-attacher csi-resizer csi-snapshotter snapshot-controller snapshot-crds kube-apiserver kube-controller-manager kube-scheduler)
bash scripts/k8s-build.sh "${components[@]}" >/dev/null
echo "k8s-tier: binaries and tools ready ($((SECONDS-t0)) s)"
npx tap --disable-coverage --timeout 900 "${@:-test/k8s/tier.test.ts}"
echo "k8s-tier: done in $((SECONDS-t0)) s"
