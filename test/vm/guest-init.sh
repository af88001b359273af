#!/bin/bash
# Second stage of the VM-tier guest, run by the initramfs chrooted into the overlay root (so
# every binary is the host's own). Brings up networking, the guest agent (the host's exec
# channel), starts the harness's run script, and meanwhile the kernel NFS server with a NAS-like
# tree; `ready` once that is up and the run script listens on VM_WAIT_PORTS. It talks
# to the host only through files in /run/vm (a 9p share of the harness's temp dir):
#   config.env (in), run.sh (in), phase markers `base-ready`, `ready`, `failed` (out), logs.
set -uo pipefail
shared=/run/vm
# shellcheck source=/dev/null
. "$shared/config.env"
t0=$(cut -d' ' -f1 /proc/uptime)
say() { echo "vm-guest[$(cut -d' ' -f1 /proc/uptime)s]: $*"; }
fail() {
  say "FAILED: $*"
  echo "$*" >"$shared/failed"
  exit 1
}
ports_listening() {
  # /proc/net/tcp{,6} columns: local address (hex ip:port) ... state (0A = LISTEN). One awk
  # for all ports: every process started here costs the node plugin CPU while it boots.
  (($#)) || return 0
  awk -v want="$*" '
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) need[sprintf(":%04X", w[i])] = 1 }
    $4 == "0A" { p = substr($2, length($2) - 4); if (p in need) delete need[p] }
    END { for (p in need) exit 1; exit 0 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

hostname "${VM_HOSTNAME:-talos-worker-1}"

# Network: no default route, so the guest can reach nothing but itself. QEMU's user network
# forwards host ports to 127.0.0.1 here; route_localnet lets eth0 accept (and ARP for) them.
ip link set lo up
ip link set eth0 up || fail "no eth0 (virtio_net missing?)"
ip addr add 10.0.2.15/24 dev eth0
echo 1 >/proc/sys/net/ipv4/conf/eth0/route_localnet
echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet

# The exec channel: QEMU's guest agent on the virtio-serial port the harness named.
qga_dev=
for p in /sys/class/virtio-ports/*; do
  [[ $(cat "$p/name" 2>/dev/null) == org.qemu.guest_agent.0 ]] && qga_dev=/dev/${p##*/}
done
[[ -n $qga_dev ]] || fail "no guest agent port (virtio_console missing?)"
mkdir -p /run/qga
qemu-ga -m virtio-serial -p "$qga_dev" -t /run/qga >"$shared/qga.log" 2>&1 &
qga=$!

run=
stop() {
  say "stopping"
  if [[ -n $run ]]; then
    kill -TERM -- "-$run" 2>/dev/null
    for _ in $(seq 1 "${VM_STOP_GRACE:-100}"); do kill -0 "$run" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$run" 2>/dev/null
  fi
  # Unmount what the run script (the node plugin) left so disks are flushed before power-off.
  awk '$2 ~ "^/(var/lib/kubelet|mnt|tmp)/" { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  rpc.nfsd 0 2>/dev/null
  kill "$qga" 2>/dev/null
  sync
  exit 0
}
trap stop TERM INT

# The run script (the node plugin, slow to start under TCG) starts now, while the NFS server
# comes up.
if [[ -s $shared/run.sh ]]; then
  # Own process group, so stop() reaches everything the script started.
  setsid bash "$shared/run.sh" </dev/null >"$shared/run.log" 2>&1 &
  run=$!
fi

# The NAS: a tmpfs (overlayfs can't be exported) holding /volume1/k8s-volumes/talos. The same
# tree answers NFSv4 at the Synology-like path through the fsid=0 pseudo root and NFSv3 at the
# real path /volume1/k8s-volumes (a bind mount of the tmpfs).
mkdir -p /srv/nas /volume1
mount -t tmpfs -o mode=755,size="${VM_NAS_SIZE:-1g}" nas /srv/nas
mkdir -p /srv/nas/volume1/k8s-volumes/talos
mount --bind /srv/nas/volume1 /volume1
cat >/etc/exports <<EOF
/srv/nas *(rw,fsid=0,crossmnt,no_root_squash,no_subtree_check,insecure,sync)
/volume1/k8s-volumes *(rw,fsid=1,no_root_squash,no_subtree_check,insecure,sync)
EOF
# Exports the host may carry must not leak into the guest (the overlay hides them).
rm -rf /etc/exports.d
mkdir -p /run/rpcbind /var/lib/nfs/v4recovery
mount -t nfsd nfsd /proc/fs/nfsd || fail "nfsd filesystem"
# A fresh server has nothing to recover: a short grace, then ended explicitly below, so the
# first OPEN doesn't wait 90 s.
echo 10 >/proc/fs/nfsd/nfsv4gracetime
rpcbind -w || fail "rpcbind"
exportfs -ra || fail "exportfs"
rpc.mountd -p "$VM_MOUNTD_PORT" || fail "rpc.mountd"
rpc.statd --no-notify >/dev/null 2>&1 || say "rpc.statd failed (NFSv3 needs nolock)"
rpc.nfsd -p 2049 "${VM_NFSD_THREADS:-4}" || fail "rpc.nfsd"
echo Y >/proc/fs/nfsd/v4_end_grace 2>/dev/null || true

say "services up in $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}')s"
: >"$shared/base-ready"

if [[ -n $run ]]; then
  deadline=$((SECONDS + ${VM_READY_TIMEOUT:-240}))
  # shellcheck disable=SC2086
  until ports_listening ${VM_WAIT_PORTS:-}; do
    if ! kill -0 "$run" 2>/dev/null; then
      wait "$run"
      fail "run script exited ($?) before ports ${VM_WAIT_PORTS:-} listened; see run.log"
    fi
    ((SECONDS < deadline)) || fail "ports ${VM_WAIT_PORTS:-} not listening after ${VM_READY_TIMEOUT:-240}s; see run.log"
    sleep 0.5
  done
fi
say "ready"
: >"$shared/ready"

# Stay up until stopped; report the run script's end so the host can notice a crash.
while :; do
  if [[ -n $run ]] && ! kill -0 "$run" 2>/dev/null; then
    wait "$run"
    code=$?
    echo "$code" >"$shared/run-exited"
    say "run script exited with $code"
    run=
  fi
  sleep 1 &
  wait $!
done
