#!/bin/sh
# The image's entrypoint (under tini): sizes V8's old space from the container's memory limit,
# then execs the program. Without a cap V8 grows its heap freely (to ~220 MB after a few thousand
# operations, all of it garbage it has not bothered to collect) and a pod with a memory limit
# is OOM-killed instead of collecting; with it the process stays flat (docs/image.md).
#
# old space = (limit - 96 MiB) / 2, at least 16 MiB. The 96 MiB are what the process needs besides
# the old space (measured: ~85 MiB RSS beyond a 32 MiB old space with both drivers after 2,000
# operations); half the rest leaves room for the young generation and fragmentation.
# A --max-old-space-size already in NODE_OPTIONS wins; no limit (or none readable) leaves V8's
# default. CGROUP_ROOT exists for the tests.
set -eu
cg=${CGROUP_ROOT:-/sys/fs/cgroup}
limit=
if [ -r "$cg/memory.max" ]; then
  limit=$(cat "$cg/memory.max")                       # cgroup v2: a number or "max"
elif [ -r "$cg/memory/memory.limit_in_bytes" ]; then
  limit=$(cat "$cg/memory/memory.limit_in_bytes")     # cgroup v1: a huge number when unlimited
fi
case $limit in '' | *[!0-9]*) limit= ;; esac
# v1's "unlimited" is LONG_MAX rounded to a page; anything above 1 TiB is no limit here.
if [ -n "$limit" ] && [ ${#limit} -le 13 ] && [ "$limit" -le 1099511627776 ]; then
  case " ${NODE_OPTIONS:-} " in
    *" --max-old-space-size="* | *" --max_old_space_size="*) ;;
    *)
      heap=$(( (limit / 1048576 - 96) / 2 ))
      [ "$heap" -ge 16 ] || heap=16
      NODE_OPTIONS="--max-old-space-size=$heap${NODE_OPTIONS:+ $NODE_OPTIONS}"
      export NODE_OPTIONS
      ;;
  esac
fi
# glibc's malloc (the image is Debian's glibc): at most 2 arenas instead of 8 per core, and free
# memory at the top of the heap given back past 128 KiB instead of a threshold that grows with the
# largest block freed. grpc-js/nghttp2, OpenSSL and the thread pool's threads each kept an arena
# of freed blocks: -6 to -8 MiB RSS after 2,000 operations (bench/rss.ts), idle and latency the
# same. A GLIBC_TUNABLES already set (even empty) wins.
GLIBC_TUNABLES=${GLIBC_TUNABLES-glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072}
export GLIBC_TUNABLES
# V8 flags for a small, long-lived, I/O-bound server (measured one by one with bench/rss.ts and
# bench/start.ts, docs/performance-startup-memory-node.md): a 1 MiB semi-space instead of V8's up
# to 16 (-7 MiB idle; the young generation is collected more often, each time in well under a
# millisecond), and no optimising compilers (TurboFan, Maglev: -7.5 MiB of the node binary's code
# paged in, and none of their code; the CSI calls wait on Proxmox, NFS and mkfs, not on
# JavaScript, and the latency benches show no difference). Not --optimize-for-size: -3 MiB idle
# but +40-60 ms CPU at start. PVE_NFS_CSI_NODE_FLAGS replaces the start flags (empty: none); they
# are node flags, not NODE_OPTIONS, because Node allows only a few V8 flags there.
flags=${PVE_NFS_CSI_NODE_FLAGS-"--max-semi-space-size=1"}
# --no-opt and --no-maglev are set by the program itself once every socket serves
# (v8.setFlagsFromString, src/late-v8-flags.ts), not here: any V8 flag that changes code
# generation changes V8's flag hash, and then the code cache built into the node binary for its
# own modules (http2, tls, net...) and the compile cache below are refused and everything is
# compiled again: +30-40 ms CPU before the first Probe. Nothing is optimised that early anyway.
# Empty: none.
PVE_NFS_CSI_V8_FLAGS_AFTER_START=${PVE_NFS_CSI_V8_FLAGS_AFTER_START-"--no-opt --no-maglev"}
export PVE_NFS_CSI_V8_FLAGS_AFTER_START
main=${PVE_NFS_CSI_MAIN:-/app/dist/bundle/main.js}
# The bundle's V8 code cache, made when it was built (scripts/bundle.ts runs the program once per
# mode through this script): the program's functions are not parsed and compiled again at every
# start. Node checks it against the node binary and the flags and ignores it when they differ.
# Portable: entries are keyed by the path relative to the cache, since the bundle is built in
# /src and runs from /app. A NODE_COMPILE_CACHE already set (even empty) wins.
if [ -z "${NODE_COMPILE_CACHE+set}" ] && [ -d "${main%/*}/compile-cache" ]; then
  NODE_COMPILE_CACHE=${main%/*}/compile-cache
  NODE_COMPILE_CACHE_PORTABLE=1
  export NODE_COMPILE_CACHE NODE_COMPILE_CACHE_PORTABLE
fi
# shellcheck disable=SC2086 # the flags are words
exec node $flags "$main" "$@"
