#!/usr/bin/env bash
# Prepares the VM tier's guest: host packages, a Debian kernel unpacked into the cache (never
# installed into /boot) and a small busybox initramfs. Idempotent; a second run only verifies.
# Prints "kernel=<path> initrd=<path> modules=<dir> kver=<version>" on its last line.
set -euo pipefail
start=$EPOCHREALTIME
repo=$(cd "$(dirname "$0")/../.." && pwd)
# Outside the checkout, so a fresh clone (CI's) reuses the kernel and initramfs: the kernel by its
# package name, the initramfs by a hash of what goes into it (below).
cache=${VM_CACHE_DIR:-${PVE_NFS_CSI_CACHE:-$HOME/.cache/pve-nfs-csi}/vm}
mkdir -p "$cache"
# Concurrent runs (two test files, say) would unpack into the same directories.
exec 9>"$cache/.lock"
flock 9

log() { echo "vm/prepare: $*" >&2; }

# qemu-guest-agent is the exec channel; libnfs-utils lets the host check the guest's NFS
# server from user space (the host kernel has no NFS client). cryptsetup-bin: the guest runs the
# host's cryptsetup for LUKS volumes (the host kernel has no device-mapper, the guest's has).
packages=(qemu-system-x86 qemu-guest-agent busybox-static cpio kmod nfs-kernel-server nfs-common
  libnfs-utils iproute2 xz-utils cryptsetup-bin)
updated=0
apt_update_once() {
  if [[ $updated == 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    updated=1
  fi
}
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt_update_once
  log "installing ${missing[*]}"
  # policy-rc.d or not, the host must not start nfs-server/qemu-ga services: it can't run them
  # (no NFS in the host kernel) and the guest starts its own.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The versioned generic kernel the meta package points at; "-cloud-" lacks 9p.
kpkg_of() { apt-cache depends linux-image-amd64 2>/dev/null |
  sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | grep -v cloud | head -1; }
kpkg=$(kpkg_of || true)
if [[ -z $kpkg ]]; then
  apt_update_once
  kpkg=$(kpkg_of || true)
fi
if [[ -z $kpkg ]]; then
  # Offline with an old cache: reuse whatever kernel was unpacked before.
  kpkg=$(ls -1 "$cache" 2>/dev/null | sed -n 's/^\(linux-image-.*-amd64\)$/\1/p' | sort -V | tail -1)
  [[ -n $kpkg ]] || { log "cannot resolve linux-image-amd64 (apt-cache depends found nothing)"; exit 1; }
  log "apt has no linux-image-amd64; reusing cached $kpkg"
fi
kver=${kpkg#linux-image-}
kdir=$cache/$kpkg
root=$kdir/root

if [[ ! -f $kdir/.unpacked ]]; then
  rm -rf "$kdir"
  mkdir -p "$kdir/dl"
  log "downloading $kpkg"
  (cd "$kdir/dl" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg" >&2) || {
    apt_update_once
    (cd "$kdir/dl" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg" >&2)
  }
  log "unpacking $kpkg"
  dpkg -x "$kdir"/dl/*.deb "$root"
  rm -rf "$kdir/dl"
  # usr-merged packages ship modules under usr/lib; depmod and the guest look in lib/.
  if [[ ! -d $root/lib/modules/$kver && -d $root/usr/lib/modules/$kver ]]; then
    mkdir -p "$root/lib/modules"
    ln -s "../../usr/lib/modules/$kver" "$root/lib/modules/$kver"
  fi
  depmod -b "$root" "$kver"
  touch "$kdir/.unpacked"
  # A superseded kernel is ~400 MB of dead weight.
  find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'linux-image-*' ! -path "$kdir" -exec rm -rf {} +
fi
kernel=$root/boot/vmlinuz-$kver
moddir=$root/lib/modules/$kver
[[ -f $kernel && -f $moddir/modules.dep ]] || { log "broken cache $kdir; delete it and rerun"; exit 1; }

# QEMU boots an uncompressed vmlinux with a PVH note directly: no firmware, no decompression
# in emulated code, which saves seconds per boot under TCG. Debian's bzImage carries it xz'd.
if [[ ! -f $kdir/vmlinux ]]; then
  off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$kernel" | head -1 | cut -d: -f1 || true)
  # xz stops at the end of its stream (tail may then die of SIGPIPE): judge by the output.
  if [[ -n $off ]]; then
    { tail -c +$((off + 1)) "$kernel" | xz -dc --single-stream >"$kdir/vmlinux.tmp"; } 2>/dev/null || true
  fi
  if [[ -f $kdir/vmlinux.tmp && $(head -c 4 "$kdir/vmlinux.tmp" | od -An -tx1 | tr -d ' ') == 7f454c46 ]]; then
    mv "$kdir/vmlinux.tmp" "$kdir/vmlinux"
  else
    rm -f "$kdir/vmlinux.tmp"
    log "no xz-compressed ELF in $kernel; booting the bzImage"
  fi
fi
[[ -f $kdir/vmlinux ]] && kernel=$kdir/vmlinux

# Modules of the first stage: "early" ones reach the host root (9p, overlay); "late" ones the
# guest's setup needs, loaded while the host's node binary is prefetched; "background" ones are
# needed only later and load while the setup runs. Anything else is loaded on demand from the
# full module tree, which the guest bind-mounts from this cache.
early=(virtio_pci 9pnet_virtio 9p overlay)
late=(virtio_net virtio_scsi virtio_console sd_mod nfsd)
# dm_crypt (with dm_mod) and the aes-xts-plain64 pieces: /dev/mapper/control exists only once
# dm_mod is loaded, and nothing in the guest would load it on demand.
background=(nfsv3 nfsv4 loop ext4 xfs crc32c_generic dm_crypt xts)
init_src=$repo/test/vm/initramfs-init.sh
uevent_src=$repo/test/vm/initramfs-uevent.sh
stamp=$(
  {
    echo "$kver ${early[*]} / ${late[*]} / ${background[*]}"
    cat "$init_src" "$uevent_src"
    readlink -f /bin/busybox
    dpkg-query -W -f='${Version}' busybox-static
  } | sha256sum | cut -c1-16
)
initrd=$cache/initrd-$kver-$stamp.gz
if [[ ! -f $initrd ]]; then
  log "building initramfs"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Modules sit flat in /modules: /lib/modules/<kver> is where the guest mounts the full tree.
  mkdir -p "$work"/{bin,sbin,proc,sys,dev,host,rw,newroot,modules,lib/modules/"$kver"}
  cp /bin/busybox "$work/bin/busybox"
  # The kernel opens /dev/console for PID 1 before anything can mount devtmpfs.
  mknod -m 600 "$work/dev/console" c 5 1
  add_modules() { # list-file module...
    local list=$1 m kind path base deps
    shift
    for m in "$@"; do
      # modprobe --show-depends walks modules.dep (and softdeps) in load order and names
      # built-in modules "builtin", which need no file.
      deps=$(modprobe -d "$root" -S "$kver" --show-depends "$m" 2>&1) || {
        log "module $m not found for $kver: $deps"
        exit 1
      }
      while read -r kind path _; do
        [[ $kind == insmod ]] || continue
        base=$(basename "$path")
        [[ -f $work/modules/$base ]] && continue
        cp "$path" "$work/modules/$base"
        echo "$base" >>"$list"
      done <<<"$deps"
    done
  }
  : >"$work/modules.early"
  : >"$work/modules.late"
  : >"$work/modules.background"
  add_modules "$work/modules.early" "${early[@]}"
  add_modules "$work/modules.late" "${late[@]}"
  add_modules "$work/modules.background" "${background[@]}"
  install -m 755 "$init_src" "$work/init"
  install -m 755 "$uevent_src" "$work/uevent.sh"
  (cd "$work" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$work"
  trap - EXIT
  # Older initramfs builds of this kernel are dead weight.
  find "$cache" -maxdepth 1 -name "initrd-*.gz" ! -path "$initrd" -delete
fi

log "ready in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')s ($kpkg)"
echo "kernel=$kernel initrd=$initrd modules=$moddir kver=$kver"
