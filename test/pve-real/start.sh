#!/usr/bin/env bash
# Starts the pve-real tier's Proxmox VE API (test/pve-real/ns.sh in a private mount and UTS
# namespace) with its state in STATE; prints `listening <port>` when it serves. Needs root.
#   PVE_REAL_PRIVS   the CSI role's privileges (default: docs/configuration.md's base role)
set -euo pipefail
STATE="${1:?usage: start.sh STATE}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../scripts/lib/ensure.sh
source "$HERE/../../scripts/lib/ensure.sh"
# shellcheck source=../../scripts/lib/pve-real.sh
source "$HERE/../../scripts/lib/pve-real.sh"
ensure_pve_real
export PVE_REAL_PRIVS="${PVE_REAL_PRIVS:-VM.Audit VM.Config.Disk Datastore.Allocate Datastore.AllocateSpace Datastore.Audit}"
mkdir -p "$STATE/tls"
if [ ! -e "$STATE/tls/cert.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=hyper1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
    -keyout "$STATE/tls/key.pem" -out "$STATE/tls/cert.pem" 2>/dev/null
fi
exec unshare -mu bash "$HERE/ns.sh" "$STATE"
