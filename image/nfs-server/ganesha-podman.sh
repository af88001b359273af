#!/usr/bin/env bash
# Stands in for `ganesha.nfsd` in scripts/ganesha.sh (GANESHA_NFSD=this file): starts the NFS
# server image ($NFS_SERVER_IMAGE) detached, with the same arguments, so ganesha.sh's own start,
# readiness check, JSON and stop work unchanged:
#   - the host network: the ports in the configuration ganesha.sh wrote are the server's;
#   - the host PID namespace: the pid ganesha writes to its pid file (-p) is the host's, so
#     ganesha.sh's liveness check and its SIGTERM reach the server, and the container ends with
#     it (--rm removes it);
#   - the server's directory (configuration, log, pid file, export, recovery) at the same path;
#   - privileged: the VFS backend opens files by handle (CAP_DAC_READ_SEARCH) and raises its
#     open-file limit; rpcbind's socket from the host when NFSv3 registers with it.
set -euo pipefail
conf=""
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in -f) conf="$2"; shift 2 ;; *) shift ;; esac
done
[ -n "$conf" ] || { echo "ganesha-podman.sh: no -f CONFIG among the arguments" >&2; exit 2; }
dir="$(dirname "$conf")"
rpc=()
[ -S /run/rpcbind.sock ] && rpc=(--volume /run/rpcbind.sock:/run/rpcbind.sock)
podman run --detach --rm --name "pnc-nfs-$(basename "$dir")-$$" --network=host --pid=host --privileged \
  --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
  --volume "$dir:$dir" "${rpc[@]}" "${NFS_SERVER_IMAGE:?NFS_SERVER_IMAGE names the NFS server image}" "${args[@]}" >/dev/null
