#!/usr/bin/env bash
# ensure_promtool: Prometheus' promtool (its rule unit tests, `promtool test rules`) from Debian's
# `prometheus` package: a prebuilt binary, seconds to install, where building the Prometheus Go
# module took 13-51 minutes of a cold run. The package also ships the server's systemd unit; no
# test starts it. Sets PROMTOOL and PROMTOOL_VERSION. Sourced after scripts/lib/ensure.sh.

PROMTOOL=/usr/bin/promtool
PROMTOOL_VERSION=

ensure_promtool() {
  ensure_apt prometheus || return 1
  [[ -x $PROMTOOL ]] || { echo "Debian's prometheus package installed no $PROMTOOL" >&2; return 1; }
  PROMTOOL_VERSION="$(dpkg-query -W -f='${Version}' prometheus)"
}
