# shellcheck shell=bash
# Proxmox VE 9's own Perl API code for the pve-real tier, sourced after scripts/lib/ensure.sh.
# ensure_pve_real installs the Debian Perl modules the code uses, unpacks the vendored, unmodified
# sources (shared/vendor/proxmox-ve/*.tar.gz) once per set of tarballs into
# $CACHE/pve-real-<hash>/ (outside the checkout, so a fresh clone unpacks nothing), runs the two
# generation steps their own Makefiles run (pve-cluster's IPCConst.pm, pve-manager's pvecfg.pm),
# and sets PVE_REAL_INC: the Perl include path, the tier's stand-ins (test/pve-real/perl) first.

PVE_REAL_VENDOR="${PVE_REAL_VENDOR:-$ROOT/../shared/vendor/proxmox-ve}"
[ -d "$PVE_REAL_VENDOR" ] || PVE_REAL_VENDOR=/work/shared/vendor/proxmox-ve
# The packages the API code loads, all in Debian 12 (the vendor README lists how they were found).
PVE_REAL_DEBS=(
  libanyevent-perl libanyevent-http-perl libjson-perl libjson-xs-perl libuuid-perl libnet-ssleay-perl
  libio-socket-ssl-perl libfilesys-df-perl libnet-dbus-perl libcrypt-openssl-rsa-perl
  libcrypt-openssl-random-perl libmime-base32-perl libclone-perl libyaml-libyaml-perl
  libxml-parser-perl libtemplate-perl libhttp-daemon-perl libnet-ip-perl libnet-ldap-perl
  libauthen-pam-perl libdata-dump-perl libposix-strptime-perl librrds-perl
  libstring-shellquote-perl liblinux-inotify2-perl libdigest-hmac-perl libtimedate-perl libwww-perl
  libnet-dns-perl libio-multiplex-perl liburi-perl libnet-subnet-perl libcrypt-openssl-bignum-perl
  libdevel-cycle-perl libio-stringy-perl
)
# Which source folder of each tarball holds its Perl modules.
PVE_REAL_LIBDIRS=(pve-common/src pve-cluster/src pve-access-control/src pve-guest-common/src
  pve-storage/src qemu-server/src pve-http-server/src pve-manager)

ensure_pve_real() {
  ensure_apt "${PVE_REAL_DEBS[@]}" openssl util-linux
  local hash dir lock t0=$SECONDS
  hash="$(cd "$PVE_REAL_VENDOR" && sha256sum ./*.tar.gz | sha256sum | cut -c1-16)"
  dir="$CACHE/pve-real-$hash"
  if [ ! -e "$dir/.done" ]; then
    mkdir -p "$dir"; exec {lock}>"$dir/.lock"; flock "$lock"
    if [ ! -e "$dir/.done" ]; then
      rm -rf "$dir/src" "$dir/gen" && mkdir -p "$dir/src" "$dir/gen/PVE/Cluster"
      local f
      for f in "$PVE_REAL_VENDOR"/*.tar.gz; do tar -xzf "$f" -C "$dir/src"; done
      awk -f "$dir/src/pve-cluster/src/PVE/Cluster/IPCConst.pm.awk" \
        "$dir/src/pve-cluster/src/pmxcfs/cfs-ipc-ops.h" >"$dir/gen/PVE/Cluster/IPCConst.pm"
      local ver=""
      for f in "$PVE_REAL_VENDOR"/pve-manager-*.tar.gz; do ver="${f##*/pve-manager-}" && ver="${ver%.tar.gz}"; done
      sed -e "s/@PACKAGE@/pve-manager/; s/@VERSION@/$ver/g; s/@PVERELEASE@/${ver%.*}/g; s/@REPOID@/vendored/g" \
        "$dir/src/pve-manager/PVE/pvecfg.pm.in" >"$dir/gen/PVE/pvecfg.pm"
      touch "$dir/.done"
      echo "unpacked Proxmox VE sources into $dir in $((SECONDS - t0)) s" >&2
    fi
    exec {lock}>&-
  fi
  PVE_REAL_DIR="$dir"
  PVE_REAL_INC="$ROOT/test/pve-real/perl:$dir/gen"
  local d
  for d in "${PVE_REAL_LIBDIRS[@]}"; do PVE_REAL_INC+=":$dir/src/$d"; done
  export PVE_REAL_DIR PVE_REAL_INC
}
