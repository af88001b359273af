#!/bin/sh
# Stand-in for Proxmox's QEMU build (pve-qemu-kvm, not in Debian): installed as
# /usr/bin/qemu-system-x86_64 and /usr/bin/kvm in the pve-real tier's namespace. qemu-server asks
# it its version (kvm_user_version: `-version`, which pve-qemu-kvm 10.1 answers like this) before
# it writes a config; the tier's VMs stay stopped, so starting one is refused.
case "$1" in
-version | --version)
  echo "QEMU emulator version 10.1.2 (pve-qemu-kvm_10.1.2-4)"
  echo "Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers"
  ;;
*)
  echo "pve-real tier: starting a VM is not modelled (no QEMU)" >&2
  exit 1
  ;;
esac
