#!/bin/busybox sh
# PID 1 of the VM-tier guest (first stage, runs from the initramfs). It loads the modules,
# builds the guest's root as a tmpfs overlay over the host's root (shared read-only over 9p),
# runs the second stage (test/vm/guest-init.sh, from the host's tree) chrooted there, and
# powers the machine off when that stage ends or when it receives SIGTERM.
/bin/busybox mkdir -p /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

say() { echo "vm-init[$(cut -d' ' -f1 /proc/uptime)s]: $*" >/dev/console; }
die() {
  say "FATAL: $*"
  [ -d /newroot/run/vm ] && echo "$*" >/newroot/run/vm/failed
  sync
  poweroff -f
}

stage2= modules= node=/usr/bin/node
for arg in $(cat /proc/cmdline); do
  case $arg in
    vm.stage2=*) stage2=${arg#vm.stage2=} ;;
    vm.modules=*) modules=${arg#vm.modules=} ;;
    vm.node=*) node=${arg#vm.node=} ;;
  esac
done
kver=$(uname -r)
say "loading modules"

load_modules() {
  while read -r m; do
    # Soft dependencies such as crc32c-intel legitimately fail on CPUs without the feature.
    insmod "/modules/$m" 2>/dev/null || say "insmod $m failed (ignored)"
  done <"$1"
}
load_modules /modules.early

mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host || die "9p mount of host root failed"
# The guest's first node start would otherwise read its ~100 MB binary page by page over 9p;
# cache=loose keeps what this prefetch reads.
# vm.node: the host's node binary the tests run on (scripts/lib/ensure.sh may cache its own).
node_bin=$(readlink -f "/host$node" 2>/dev/null || true)
case $node_bin in /host/*) cat "$node_bin" >/dev/null 2>&1 & ;; esac
load_modules /modules.late

mount -t tmpfs -o mode=755 tmpfs /rw || die "tmpfs for the overlay failed"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  die "overlay root failed"

# Fresh instances rather than moved ones: this root keeps its /dev for the console.
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mount -t tmpfs -o mode=755 tmpfs /newroot/run
mkdir -p /newroot/run/vm
mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=512000 hostrun /newroot/run/vm || die "9p mount of the run dir failed"

# A checkout under /tmp or /run (CI clones wherever it likes) would be hidden by the guest's own
# tmpfs there: show the host's copy at the same path.
repo=${stage2%/test/vm/guest-init.sh}
case $repo in
  /tmp/*|/run/*)
    mkdir -p "/newroot$repo"
    mount --bind "/host$repo" "/newroot$repo" || die "bind mount of the checkout $repo failed"
    ;;
esac

# The full module tree of the guest kernel, for modules loaded on demand: the kernel's modprobe
# helper resolves paths in this initramfs root, tools in the chroot in theirs.
if [ -n "$modules" ] && [ -d "/host$modules" ]; then
  mount --bind "/host$modules" "/lib/modules/$kver"
  mkdir -p "/newroot/lib/modules/$kver"
  mount --bind "/host$modules" "/newroot/lib/modules/$kver"
fi

uevent /bin/sh /uevent.sh >/dev/null 2>&1 &

say "root ready"
load_modules /modules.background &

[ -n "$stage2" ] && [ -f "/newroot$stage2" ] || die "second stage '$stage2' not found"
chroot /newroot /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash "$stage2" </dev/null >/dev/console 2>&1 &
child=$!

# A signal interrupts `wait`; keep waiting until the second stage is gone, but never longer
# than its grace period once asked to stop.
trap 'say "stop requested"; kill -TERM $child 2>/dev/null; (sleep 20; kill -KILL $child 2>/dev/null) &' TERM
while kill -0 "$child" 2>/dev/null; do wait "$child"; done
say "second stage ended; powering off"
sync
poweroff -f
