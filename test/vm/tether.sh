#!/bin/bash
# Ties a process's life to the VM-tier harness (which can't catch its own SIGKILL). The harness
# holds a pipe on fd FD of this script: a line "kill" SIGKILLs COMMAND; end of input (the
# harness exited, crashed or was killed) sends SIGTERM, then SIGKILL after 5 s, and removes DIR
# (a harness temp dir named pve-vm-*; "-" for none). Exits with COMMAND's status.
# usage: tether.sh FD DIR COMMAND [ARG...]
#   FD 0: COMMAND gets /dev/null as stdin (QEMU);  FD 3: COMMAND keeps this stdin (a host command).
set -u
fd=$1 dir=$2
shift 2
case $fd in
  0) exec 4<&0 </dev/null ;;
  3) exec 4<&3 3<&- ;;
  *) echo "tether: FD must be 0 or 3" >&2; exit 2 ;;
esac
"$@" 4<&- &
child=$!
cleanup=0
[[ $dir != - && ${dir##*/} == pve-vm-* ]] && cleanup=1
{
  while IFS= read -r line; do
    if [[ $line == kill ]]; then
      kill -KILL "$child" 2>/dev/null
      exit 0
    fi
  done
  # The harness is gone, so nobody else will clean its temp dir: leave word for the main flow.
  ((cleanup)) && : >"$dir/.harness-gone"
  kill -TERM "$child" 2>/dev/null
  for _ in $(seq 50); do
    kill -0 "$child" 2>/dev/null || exit 0
    sleep 0.1
  done
  kill -KILL "$child" 2>/dev/null
} <&4 &
reader=$!
exec 4<&-
# Signals for this script are meant for COMMAND. As an asynchronous command it ignores SIGINT,
# so every one of them becomes SIGTERM.
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  wait "$child"
  rc=$?
  kill -0 "$child" 2>/dev/null || break
done
kill "$reader" 2>/dev/null
if ((cleanup)) && [[ -e $dir/.harness-gone ]]; then rm -rf -- "$dir"; fi
exit "$rc"
