#!/bin/sh
# Stands in for udev's by-id links of SCSI disks (the guest runs no udev): busybox `uevent`
# runs this for every kernel uevent, in the initramfs root, whose /dev is the same devtmpfs
# the guest's root sees. Only wwn-0x<naa> links, the ones a Proxmox disk is found by.
[ "$SUBSYSTEM" = block ] || exit 0
case $DEVNAME in sd*) ;; *) exit 0 ;; esac
dir=/dev/disk/by-id
case $ACTION in
  add)
    suffix=
    if [ "$DEVTYPE" = partition ]; then
      wwid=$(cat "/sys$DEVPATH/../device/wwid" 2>/dev/null)
      suffix=-part$PARTN
    else
      wwid=$(cat "/sys$DEVPATH/device/wwid" 2>/dev/null)
    fi
    case $wwid in naa.*) ;; *) exit 0 ;; esac
    mkdir -p "$dir"
    ln -sfn "../../$DEVNAME" "$dir/wwn-0x${wwid#naa.}$suffix"
    ;;
  remove)
    for l in "$dir"/*; do
      [ "$(readlink "$l")" = "../../$DEVNAME" ] && rm -f "$l"
    done
    ;;
esac
exit 0
