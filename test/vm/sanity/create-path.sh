#!/usr/bin/env bash
# csi-sanity --csi.createmountpathcmd / --csi.createstagingpathcmd: creates PATH in the guest
# and prints it (csi-sanity uses the printed path).
exec "$(dirname "${BASH_SOURCE[0]}")/../guest-exec.sh" -t 30 /bin/sh -c 'mkdir -p -- "$1" && printf "%s\n" "$1"' sh "$1"
