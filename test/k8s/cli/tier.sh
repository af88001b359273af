#!/usr/bin/env bash
# `npm run k8s:cli`: the day-2 subcommands (report, archives, move) and their Kubernetes client
# (src/k8s) against a real etcd + kube-apiserver (no controllers: the tests create the objects
# the controllers would; move's test also runs kube-controller-manager, whose PV binder must
# bind the recreated claim), the Proxmox simulator and ganesha. Binaries come from
# scripts/k8s-build.sh (cached under ~/.cache/pve-nfs-csi; shared with the k8s tier).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source scripts/lib/ensure.sh
ensure_node_modules

t0=$SECONDS
ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils openssl util-linux
# helm renders the chart whose archive-prune CronJob RBAC the archives test runs under.
ensure_helm
export HELM="$HELM"
bash scripts/k8s-build.sh etcd kube-apiserver kube-controller-manager >/dev/null
echo "k8s-cli: binaries ready ($((SECONDS-t0)) s)"
if [ $# -eq 0 ]; then set -- test/k8s/cli/*.test.ts; fi
npx tap --disable-coverage --timeout 600 "$@"
echo "k8s-cli: done in $((SECONDS-t0)) s"
