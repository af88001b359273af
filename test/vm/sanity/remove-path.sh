#!/usr/bin/env bash
# csi-sanity --csi.removemountpathcmd / --csi.removestagingpathcmd: removes PATH in the guest.
# --one-file-system: a mount the driver failed to remove must not have its data deleted.
exec "$(dirname "${BASH_SOURCE[0]}")/../guest-exec.sh" -t 30 /bin/rm -rf --one-file-system -- "$1"
