#!/usr/bin/env bash
# VM tier entry point: a QEMU (TCG) Linux guest that plays the Talos VM. See test/vm/README.md.
#   test/vm/vm.sh prepare              install host packages, fetch+unpack the kernel, build the initramfs (cached)
#   test/vm/vm.sh run -- COMMAND...    boot the guest with the node plugin inside, run COMMAND on the host
#                                      with VM_* variables, tear down, exit with COMMAND's code
#   test/vm/vm.sh smoke                boot and check forwarding, hot-plug, NFS and the exec channel
# Environment: VM_NODE_CMD (shell command run in the guest instead of the node plugin),
# VM_NODE_ARGS (extra plugin flags), VM_LOG_DIR (default .run/vm), VM_READY_TIMEOUT (s, default 300).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
tsx=(node --import "$repo/node_modules/tsx/dist/loader.mjs")
[[ -f $repo/node_modules/tsx/dist/loader.mjs ]] || { echo "vm: run npm ci first (tsx missing)" >&2; exit 1; }

cmd=${1:-}
shift || true
case $cmd in
  prepare) exec bash test/vm/prepare.sh ;;
  run)
    [[ ${1:-} == -- ]] && shift
    (($#)) || { echo "usage: test/vm/vm.sh run -- COMMAND [ARG...]" >&2; exit 2; }
    exec "${tsx[@]}" test/vm/run.ts -- "$@"
    ;;
  smoke)
    exec "${tsx[@]}" test/vm/smoke.ts "$@"
    ;;
  *)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac
