#!/usr/bin/env bash
# Inside a private mount and UTS namespace (`unshare -mu`, started by test/pve-real/start.sh):
# a node named hyper1 whose /etc/pve is the plain directory $STATE/pve (pmxcfs's stand-in), whose
# /etc, /var and /dev are overlays over the host's (so nothing of the host changes) and whose
# /usr/sbin has the lvm2 stand-in; then the real `pveum` creates the role, user and token as
# docs/configuration.md says, and test/pve-real/server.pl serves the API.
set -euo pipefail
STATE="$1" HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PERL5LIB="$PVE_REAL_INC" PVE_REAL_LVM="$STATE/lvm" PATH=/usr/sbin:/usr/bin:/sbin:/bin

hostname hyper1
mount --make-rprivate /
ov() { mkdir -p "$STATE/ov/$2" "$STATE/ov/$2.work"; mount -t overlay overlay -o "lowerdir=$1,upperdir=$STATE/ov/$2,workdir=$STATE/ov/$2.work" "$1"; }
ov /etc etc
ov /var var
ov /dev dev
mkdir -p "$STATE/pve" /etc/pve && mount --bind "$STATE/pve" /etc/pve
mount -t tmpfs tmpfs /run
mkdir -p /var/lib/rrdcached/db/pve-node-9.0 /var/lib/rrdcached/db/pve-vm-9.0 /var/lib/rrdcached/db/pve-storage-9.0
mkdir -p /run/lock /run/qemu-server /var/log/pve/tasks /var/lib/qemu-server /var/lib/vz "$STATE/lvm" /dev/pve
printf '127.0.0.1 localhost\n127.0.0.1 hyper1\n' >/etc/hosts
sbin="$STATE/sbin" && mkdir -p "$sbin"
for c in lvs vgs pvs lvcreate lvremove lvrename lvchange lvextend lvresize vgscan vgchange; do
  ln -sfn "$HERE/lvm/lvm-standin.pl" "$sbin/$c"
done
mount -t overlay overlay -o "lowerdir=$sbin:/usr/sbin" /usr/sbin
bin="$STATE/bin" && mkdir -p "$bin"
ln -sfn "$HERE/qemu/kvm-standin.sh" "$bin/qemu-system-x86_64" && ln -sfn "$HERE/qemu/kvm-standin.sh" "$bin/kvm"
mount -t overlay overlay -o "lowerdir=$bin:/usr/bin" /usr/bin

# pmxcfs's tree for a standalone node: made once per role (the real `pveum` creates the role,
# user and token of docs/configuration.md and docs/snapshots.md), then copied from the cache.
# keyed by the role and this script, so a changed seed recipe makes a new seed
seed="$PVE_REAL_DIR/seed-$({ printf '%s' "$PVE_REAL_PRIVS"; cat "$HERE/ns.sh"; } | sha256sum | cut -c1-12)"
if [ ! -e "$seed/token" ]; then
  cd /etc/pve
  mkdir -p nodes/hyper1/qemu-server nodes/hyper1/lxc nodes/hyper1/priv priv/lock virtual-guest
  ln -sfn nodes/hyper1 local
  cat >storage.cfg <<'CFG'
dir: local
	path /var/lib/vz
	content iso,vztmpl,backup

lvmthin: local-lvm
	thinpool data
	vgname pve
	content rootdir,images
CFG
  : >datacenter.cfg
  # the Kubernetes worker the tests publish to (a VM an administrator made; it stays stopped)
  cat >nodes/hyper1/qemu-server/111.conf <<'CFG'
cores: 4
memory: 8192
name: talos-worker-1
scsihw: virtio-scsi-single
smbios1: uuid=6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4b11
CFG
  printf 'user:root@pam:1:0:::root@hyper1::\n' >user.cfg
  openssl genrsa -out pve-www.key 2048 2>/dev/null
  openssl genrsa -out priv/authkey.key 2048 2>/dev/null
  openssl rsa -in priv/authkey.key -pubout -out authkey.pub 2>/dev/null
  pveum() { perl -MPVETierStandIns "$PVE_REAL_DIR/src/pve-access-control/src/pveum" "$@" 2>&1 | { grep -v '^setlogsock' || true; }; }
  pveum role add CSI -privs "$PVE_REAL_PRIVS"
  pveum user add kubernetes-csi@pve
  pveum acl modify / -user kubernetes-csi@pve -role CSI
  pveum user token add kubernetes-csi@pve csi -privsep 0 --output-format json >"$STATE/token"
  rm -rf "$seed.tmp" && mkdir -p "$seed.tmp" && cp -a /etc/pve "$seed.tmp/pve" && cp "$STATE/token" "$seed.tmp/token"
  rm -rf "$seed" && mv "$seed.tmp" "$seed"
else
  cp -a "$seed/pve/." /etc/pve/ && cp "$seed/token" "$STATE/token"
fi
cd /
export PVE_REAL_REQUEST_LOG="$STATE/requests.log"
exec perl "$HERE/server.pl" "${PVE_REAL_PORT:-0}" "$STATE/tls/cert.pem" "$STATE/tls/key.pem"
