#!/usr/bin/env bash
# A real NFS server for tests: nfs-ganesha (user space, VFS backend) on 127.0.0.1.
#
#   scripts/ganesha.sh start|stop|status [--dir DIR] [--nfs-port N] [--mount-port N] [--protocols 3,4|4]
#                                        [--extra-export PSEUDO=REL]...
#
# The export plays the NAS: share /volume1/k8s-volumes (the directory DIR/export) with a
# `talos` subdirectory, as in the cluster's StorageClass. NFSv3 and v4 over TCP (`--protocols 4`:
# v4 only, like a hardened NAS; then no MOUNT service and no rpcbind), root not squashed. `start` prints one line of JSON and is idempotent; `stop` kills the server and
# removes DIR (and rpcbind, when this script started it and no other ganesha is left).
# `--extra-export PSEUDO=REL` adds one more export of DIR/REL (made if missing) at the pseudo
# path PSEUDO, e.g. a nested export inside DIR/export or a sibling; each gets its own Export_Id.
# `@MAJOR.MINOR` makes it report that fsid (as a NAS does for a share on another volume).
# Ports: free ones unless given (the JSON says which), so servers of parallel runs never collide.
# Everything else goes to stderr.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$REPO/.run/ganesha"
NFS_PORT=""
MOUNT_PORT=""
PROTOCOLS="3, 4"
PSEUDO=/volume1/k8s-volumes
EXTRA=()
LOCK=/run/lock/pve-nfs-csi-ganesha.lock
RPCBIND_MARK=/run/pve-nfs-csi-rpcbind.pid

die() { echo "ganesha.sh: $*" >&2; exit 1; }

cmd="${1:-}"
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --nfs-port) NFS_PORT="$2"; shift 2 ;;
    --mount-port) MOUNT_PORT="$2"; shift 2 ;;
    --protocols)
      case "$2" in 3,4|"3, 4") PROTOCOLS="3, 4" ;; 4) PROTOCOLS="4" ;; *) die "--protocols takes 3,4 or 4" ;; esac
      shift 2 ;;
    --extra-export)
      [[ "$2" =~ ^/[^=]*=[^=/][^=@]*(@[0-9]+\.[0-9]+)?$ && "$2" != *..* ]] || die "--extra-export takes PSEUDO=REL[@MAJOR.MINOR] (an absolute pseudo path, a path below --dir, a Filesystem_id)"
      EXTRA+=("$2"); shift 2 ;;
    *) die "unknown argument $1 (usage: start|stop|status [--dir DIR] [--nfs-port N] [--mount-port N] [--protocols 3,4|4])" ;;
  esac
done
DIR="$(realpath -m "$DIR")"
CONF="$DIR/ganesha.conf" LOG="$DIR/ganesha.log" PIDFILE="$DIR/ganesha.pid" STATE="$DIR/state.json"
EXPORT="$DIR/export"

# A process counts only when it exists, is not a zombie and is the program we expect.
alive() {
  local pid="$1" name="$2"
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]
}
live_named() { # prints pids of live processes with that exact name (no procps needed)
  local d
  for d in /proc/[0-9]*; do alive "${d#/proc/}" "$1" && echo "${d#/proc/}"; done
  return 0
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A port below the kernel's ephemeral range (so no outgoing connection takes it meanwhile) that
# nothing on 127.0.0.1 listens on. Picked under the script's lock, and ganesha binds it before
# the lock is released, so two starts never pick the same one.
free_port() {
  local lo p i
  lo="$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
  [ "$lo" -gt 11000 ] || lo=32768
  for i in $(seq 1 500); do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
    [ "$p" != "${1:-}" ] && ! port_open "$p" && { echo "$p"; return 0; }
  done
  die "no free port found below $lo"
}
json() {
  # a running server without its state file: the ports are in its config
  [ -n "$NFS_PORT" ] || NFS_PORT="$(sed -n 's/^ *NFS_Port = \([0-9]*\);$/\1/p' "$CONF" 2>/dev/null)"
  [ -n "$MOUNT_PORT" ] || MOUNT_PORT="$(sed -n 's/^ *MNT_Port = \([0-9]*\);$/\1/p' "$CONF" 2>/dev/null)"
  printf '{"server":"127.0.0.1","share":"%s","nfsPort":%d,"mountPort":%d,"protocols":"%s","exportDir":"%s","pidFile":"%s"}\n' \
    "$PSEUDO" "$NFS_PORT" "$MOUNT_PORT" "$PROTOCOLS" "$EXPORT" "$PIDFILE"
}
running_pid() {
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  alive "$pid" ganesha.nfsd && echo "$pid"
}

ensure_packages() {
  local missing=() p
  for p in nfs-ganesha nfs-ganesha-vfs rpcbind; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "ganesha.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y --no-install-recommends "${missing[@]}" >&2
}

# NFSv3 registers with the portmapper at start-up; ganesha exits when none runs.
ensure_rpcbind() {
  port_open 111 && return 0
  rpcbind -w 9>&-
  local i
  for i in $(seq 1 50); do port_open 111 && break; sleep 0.1; done
  port_open 111 || die "rpcbind did not start"
  live_named rpcbind | head -n1 >"$RPCBIND_MARK"
}

maybe_stop_rpcbind() {
  [ -f "$RPCBIND_MARK" ] || return 0
  [ -z "$(live_named ganesha.nfsd)" ] || return 0
  local pid
  pid="$(cat "$RPCBIND_MARK")"
  if alive "$pid" rpcbind; then kill "$pid" 2>/dev/null || true; fi
  rm -f "$RPCBIND_MARK"
}

write_conf() {
  mkdir -p "$EXPORT/talos" "$DIR/recovery"
  cat >"$CONF" <<EOF
# Written by scripts/ganesha.sh; removed by 'stop'.
NFS_CORE_PARAM {
  Bind_addr = 127.0.0.1;
  NFS_Port = $NFS_PORT;
  MNT_Port = $MOUNT_PORT;
  Protocols = $PROTOCOLS;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Enable_UDP = false;
  # NFSv3 clients mount the pseudo path, like a NAS's share path, not DIR/export.
  Mount_Path_Pseudo = true;
}
NFSV4 { Graceless = true; Lease_Lifetime = 10; Grace_Period = 10; RecoveryRoot = "$DIR/recovery"; }
EXPORT {
  Export_Id = 1;
  Path = "$EXPORT";
  Pseudo = $PSEUDO;
  Access_Type = RW;
  Squash = No_Root_Squash;
  Protocols = $PROTOCOLS;
  Transports = TCP;
  SecType = sys;
  # Tests also look at (and prepare) the tree directly on disk: no attribute caching.
  Attr_Expiration_Time = 0;
  FSAL { Name = VFS; }
}
EOF
  local id=2 e
  for e in "${EXTRA[@]}"; do
    local rel="${e#*=}" fsid=""
    [[ "$rel" == *@* ]] && { fsid="Filesystem_id = ${rel#*@};"; rel="${rel%@*}"; }
    mkdir -p "$DIR/$rel"
    cat >>"$CONF" <<EOF
EXPORT {
  Export_Id = $id;
  Path = "$DIR/$rel";
  Pseudo = ${e%%=*};
  $fsid
  Access_Type = RW;
  Squash = No_Root_Squash;
  Protocols = $PROTOCOLS;
  Transports = TCP;
  SecType = sys;
  Attr_Expiration_Time = 0;
  FSAL { Name = VFS; }
}
EOF
    id=$((id + 1))
  done
}

start() {
  local pid
  if pid="$(running_pid)"; then
    cat "$STATE" 2>/dev/null || json
    return 0
  fi
  [ -n "$NFS_PORT" ] || NFS_PORT="$(free_port)"
  [ -n "$MOUNT_PORT" ] || MOUNT_PORT="$(free_port "$NFS_PORT")"
  for p in "$NFS_PORT" "$MOUNT_PORT"; do
    port_open "$p" && die "port $p on 127.0.0.1 is already in use (another ganesha? try: scripts/ganesha.sh stop --dir <its dir>)"
  done
  ensure_packages
  # NFSv3 registers with the portmapper at start-up; a v4-only server needs none.
  [ "$PROTOCOLS" = 4 ] || ensure_rpcbind
  write_conf
  rm -f "$LOG" "$PIDFILE"
  # ganesha.nfsd daemonizes; it changes directory, so every path it gets is absolute.
  # GANESHA_NFSD: another launcher with the same arguments (the NFS server image: scripts/test-images.sh).
  "${GANESHA_NFSD:-ganesha.nfsd}" -f "$CONF" -L "$LOG" -p "$PIDFILE" -N NIV_EVENT 9>&-
  local i ready=""
  for i in $(seq 1 300); do
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if grep -q 'NFS SERVER INITIALIZED' "$LOG" 2>/dev/null && port_open "$NFS_PORT" && { [ "$PROTOCOLS" = 4 ] || port_open "$MOUNT_PORT"; }; then
      ready=1
      break
    fi
    if [ -n "$pid" ] && ! alive "$pid" ganesha.nfsd; then break; fi
    sleep 0.1
  done
  if [ -z "$ready" ]; then
    echo "ganesha.sh: nfs-ganesha did not become ready within 30 s; last log lines:" >&2
    tail -n 20 "$LOG" >&2 2>/dev/null || true
    stop >/dev/null 2>&1 || true
    exit 1
  fi
  json >"$STATE"
  cat "$STATE"
}

stop() {
  local pid i
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  if alive "$pid" ganesha.nfsd; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do alive "$pid" ganesha.nfsd || break; sleep 0.1; done
    if alive "$pid" ganesha.nfsd; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  fi
  # Only ever delete a directory this script made.
  if [ -d "$DIR" ] && { [ -f "$CONF" ] || [ -z "$(ls -A "$DIR")" ]; }; then rm -rf "$DIR"; fi
  maybe_stop_rpcbind
}

status() {
  if running_pid >/dev/null; then
    cat "$STATE" 2>/dev/null || json
  else
    echo "ganesha.sh: not running (dir $DIR)" >&2
    exit 3
  fi
}

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock -w 120 9 || die "timed out waiting for $LOCK"
case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status [--dir DIR] [--nfs-port N] [--mount-port N]" ;;
esac
