#!/usr/bin/env bash
# Runs a command inside the VM-tier guest (as root, in the guest's root) through its agent.
# usage: guest-exec.sh [-i] [-t SECONDS] [--] COMMAND [ARG...]   (env VM_QGA_SOCKET)
# Exit code: the command's; 128+N if killed by signal N; 125 if the guest was unreachable.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# csi-sanity calls this hundreds of times: run a bundle (built with the esbuild that tsx
# brings, rebuilt whenever a source is newer) instead of paying tsx's start-up each time.
bundle=$repo/.cache/vm/guest-exec.mjs
esbuild=$repo/node_modules/esbuild/bin/esbuild
if [[ ! -f $bundle || $here/guest-exec.ts -nt $bundle || $here/qga.ts -nt $bundle ]] && [[ -x $esbuild ]]; then
  mkdir -p "${bundle%/*}"
  tmp=$bundle.$$.tmp
  if "$esbuild" "$here/guest-exec.ts" --bundle --platform=node --format=esm --log-level=error --outfile="$tmp"; then
    mv -f "$tmp" "$bundle"
  else
    rm -f "$tmp"
  fi
fi
if [[ -f $bundle && ! $here/guest-exec.ts -nt $bundle && ! $here/qga.ts -nt $bundle ]]; then
  exec node "$bundle" "$@"
fi
exec node --import "$repo/node_modules/tsx/dist/loader.mjs" "$here/guest-exec.ts" "$@"
