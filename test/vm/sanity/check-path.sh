#!/usr/bin/env bash
# csi-sanity --csi.checkpathcmd: prints file|directory|not_found|other for PATH in the guest,
# following symlinks like os.Stat does.
exec "$(dirname "${BASH_SOURCE[0]}")/../guest-exec.sh" -t 30 /bin/sh -c '
  if [ -f "$1" ]; then echo file
  elif [ -d "$1" ]; then echo directory
  elif [ -e "$1" ]; then echo other
  else echo not_found
  fi' sh "$1"
