#!/usr/bin/env bash
# The kubelet tier's node images, imported and unpacked once on the host into a containerd root
# directory (content, metadata, overlayfs snapshots), packed into one uncompressed tar that the
# guest unpacks into its tmpfs /var/lib/containerd before its containerd starts (one file reads
# fast over 9p; copying the tree file by file ran at ~2 MB/s). Importing in the guest costs minutes under
# TCG (gunzip and sha256 of every layer, emulated: 5 MB took 20 s, the 118 MB driver image many
# minutes); here it takes seconds, and the result is the same containerd's own store.
# Usage: test/kubelet/containerd-root.sh CONTAINERD_DIR ARCHIVE...
# Prints the tar's path. Cached as ~/.cache/pve-nfs-csi/kubelet-node-root/<key>.tar, the key
# being the containerd version and the archives' paths, sizes and times.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
bin="$1"
shift
key=$({ "$bin/containerd" --version; for a in "$@"; do stat -c '%n %s %Y' "$a"; done; } | sha256sum | cut -c1-16)
out="$CACHE/kubelet-node-root/$key.tar"
mkdir -p "$CACHE/kubelet-node-root"
exec {lock}>"$CACHE/kubelet-node-root/.lock"
flock "$lock"
if [ ! -f "$out" ]; then
  t=$SECONDS
  work=$(mktemp -d "$CACHE/kubelet-node-root/.new.XXXXXX")
  state=$(mktemp -d /tmp/ctdr.XXXXXX)
  # No CRI here: only the content store, the metadata and the overlayfs snapshotter.
  cat >"$state/config.toml" <<EOF
version = 3
root = "$work"
state = "$state/run"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]
[grpc]
  address = "$state/sock"
EOF
  "$bin/containerd" --config "$state/config.toml" >"$state/log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$state"' EXIT
  for _ in $(seq 1 100); do "$bin/ctr" -a "$state/sock" version >/dev/null 2>&1 && break; sleep 0.1; done
  for a in "$@"; do
    "$bin/ctr" -a "$state/sock" -n k8s.io images import --local --snapshotter overlayfs --discard-unpacked-layers "$a" >&2
  done
  "$bin/ctr" -a "$state/sock" -n k8s.io images ls -q >&2
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # What the guest's containerd recreates itself (sockets, temp mounts) stays out.
  rm -rf "$work/tmpmounts"
  # Whiteouts and opaque directories of the snapshots are device nodes and trusted.* xattrs.
  tar --xattrs --xattrs-include='*' --numeric-owner -C "$work" -cf "$out.tmp" .
  rm -rf "$work"
  mv "$out.tmp" "$out"
  # Roots of earlier image sets are of no further use.
  find "$CACHE/kubelet-node-root" -mindepth 1 -maxdepth 1 ! -name "$key.tar" ! -name .lock -mmin +60 -exec rm -rf {} +
  echo "containerd-root: $# images unpacked in $((SECONDS - t)) s ($(du -sh "$out" | cut -f1))" >&2
fi
exec {lock}>&-
echo "$out"
