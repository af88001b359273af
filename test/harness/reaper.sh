#!/usr/bin/env bash
# What a harness (a bench, a test file, an orchestration script) started outside itself must not
# outlive it, however it ends: kill -9 included, which runs none of its own clean-up. The harness
# keeps a registry file of what to undo (test/harness/reaper.ts writes it) and starts this script
# beside it:
#
#   reaper.sh watch REGISTRY   waits until its stdin (a pipe from the harness) closes, i.e. until
#                              the harness has ended, however; then undoes what REGISTRY lists
#   reaper.sh sweep DIR        undoes every registry in DIR whose harness is gone (a watcher that
#                              was killed as well); each harness runs it when it first registers
#
# A registry's name is <harness pid>-<its start time>.reg; each line is one thing to undo:
#   group PID START   the process group PID leads, if PID is still the process that started at
#                     START (clock ticks since boot, /proc/PID/stat field 22): a reused PID is
#                     never signalled. SIGTERM, then SIGKILL after 2 s.
#   run ARG...        a command that undoes something idempotently (scripts/ganesha.sh stop --dir D)
set -uo pipefail

start_time() { # field 22 of /proc/PID/stat; the command name (field 2) may contain spaces
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $stat
  echo "${20}"
}

alive_as() { [ "$(start_time "$1")" = "$2" ]; }

kill_group() {
  local pid="$1" start="$2" i
  alive_as "$pid" "$start" || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 20); do alive_as "$pid" "$start" || return 0; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
}

reap() {
  local file="$1" kind line
  [ -f "$file" ] || return 0
  exec 8<"$file"
  flock 8 # one reaper per registry (a watcher and a sweep may meet)
  if [ -f "$file" ]; then
    while IFS= read -r line; do
      # shellcheck disable=SC2086 # a line is words
      set -- $line
      kind="${1:-}"
      shift || continue
      case "$kind" in
        group) kill_group "$1" "$2" ;;
        run) "$@" >/dev/null 2>&1 </dev/null 8<&- ;;
      esac
    done <"$file"
    rm -f "$file"
  fi
  exec 8<&-
}

case "${1:-}" in
  watch)
    cat >/dev/null # returns when the harness's end of the pipe is closed: it has ended
    reap "$2"
    ;;
  sweep)
    for f in "$2"/*.reg; do
      [ -O "$f" ] || continue # only this user's own registries
      owner="$(basename "$f" .reg)"
      alive_as "${owner%%-*}" "${owner#*-}" && continue
      reap "$f"
    done
    ;;
  *)
    echo "usage: reaper.sh watch REGISTRY | sweep DIR" >&2
    exit 2
    ;;
esac
