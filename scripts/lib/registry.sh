#!/usr/bin/env bash
# A real OCI registry on loopback for the release tests: the CNCF distribution registry, built
# from its Go module with `go install` into $CACHE/registry-<version>/registry (outside the
# checkout, keyed by version, like the k8s binaries), served over TLS with a certificate from a
# throw-away test CA made with openssl. Nothing is added to the machine's trust store: clients
# get the CA explicitly (helm --ca-file, buildah/skopeo/podman --cert-dir / --tls-verify).
#
#   bash scripts/lib/registry.sh ensure          builds the registry when missing; prints its path
#   bash scripts/lib/registry.sh start DIR       starts it on a free 127.0.0.1 port, state in DIR;
#                                                prints DIR/env (REGISTRY=127.0.0.1:PORT, ...)
#   bash scripts/lib/registry.sh stop DIR        stops the one started in DIR (by its pid file)
#
# DIR/env, sourced by scripts and read by test/release/registry.ts:
#   REGISTRY            127.0.0.1:PORT
#   REGISTRY_CA         the test CA's certificate (PEM): helm --ca-file
#   REGISTRY_CERT_DIR   a directory with ca.crt: buildah/skopeo/podman --cert-dir
#   REGISTRY_PID        the registry's pid
# Sourcing the file instead defines the same as functions (registry_ensure, registry_start,
# registry_stop) for the calling script.
set -uo pipefail
_reg_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ensure.sh
source "$_reg_here/ensure.sh"

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
REGISTRY_BIN="$CACHE/registry-$REGISTRY_VERSION/registry"

registry_ensure() {
  if [ ! -x "$REGISTRY_BIN" ]; then
    local t=$SECONDS lock
    mkdir -p "${REGISTRY_BIN%/*}"
    # Two checkouts may build it at once; the second waits and uses the first one's binary.
    exec {lock}>"$REGISTRY_BIN.lock"; flock "$lock"
    if [ ! -x "$REGISTRY_BIN" ]; then
      echo "registry: building distribution $REGISTRY_VERSION (once, cached in ${REGISTRY_BIN%/*})" >&2
      GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="${REGISTRY_BIN%/*}/.tmp" nice -n 10 \
        go install -ldflags "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" >&2 || { exec {lock}>&-; return 1; }
      mv "${REGISTRY_BIN%/*}/.tmp/registry" "$REGISTRY_BIN" && rmdir "${REGISTRY_BIN%/*}/.tmp"
      echo "registry: built in $((SECONDS-t)) s" >&2
    fi
    exec {lock}>&-
  fi
  echo "$REGISTRY_BIN"
}

_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# _test_ca DIR: a CA and a serving certificate for 127.0.0.1/localhost signed by it (2 days),
# plus the names in REGISTRY_EXTRA_SAN (e.g. IP:10.0.2.101: the address a QEMU guest reaches the
# registry at through a guestfwd relay, which a client there verifies the certificate against).
_test_ca() {
  local d="$1" san="IP:127.0.0.1,DNS:localhost${REGISTRY_EXTRA_SAN:+,$REGISTRY_EXTRA_SAN}"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=pve-nfs-csi test registry CA" -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=127.0.0.1" -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null &&
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san") \
      -out "$d/server.pem" 2>/dev/null
}

registry_start() {
  local dir="${1:?registry_start DIR}" bin port tries=0
  bin="$(registry_ensure)" || return 1
  mkdir -p "$dir/pki" "$dir/data"
  _test_ca "$dir/pki" || { echo "registry: could not make the test CA" >&2; return 1; }
  while :; do
    port="$(_free_port)"
    cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  tls:
    certificate: $dir/pki/server.pem
    key: $dir/pki/server.key
YAML
    # setsid: its own process group, so the caller's Ctrl-C or a test runner's kill does not
    # depend on it and `stop` ends exactly this process.
    OTEL_TRACES_EXPORTER=none setsid "$bin" serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
    local pid=$! end=$((SECONDS + 20))
    until curl -fsS --cacert "$dir/pki/ca.pem" "https://127.0.0.1:$port/v2/" >/dev/null 2>&1; do
      if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $end ]; then
        kill "$pid" 2>/dev/null
        tries=$((tries + 1))
        # Another process may have taken the port between the probe and the bind: try another.
        if [ $tries -lt 3 ] && grep -q "address already in use" "$dir/registry.log"; then continue 2; fi
        echo "registry: did not come up on 127.0.0.1:$port; log:" >&2; cat "$dir/registry.log" >&2
        return 1
      fi
      sleep 0.2
    done
    break
  done
  mkdir -p "$dir/certs.d/127.0.0.1:$port"
  cp "$dir/pki/ca.pem" "$dir/certs.d/127.0.0.1:$port/ca.crt"
  cp "$dir/pki/ca.pem" "$dir/ca.crt"
  echo "$pid" >"$dir/registry.pid"
  cat >"$dir/env" <<ENV
REGISTRY=127.0.0.1:$port
REGISTRY_CA=$dir/pki/ca.pem
REGISTRY_CERT_DIR=$dir/certs.d/127.0.0.1:$port
REGISTRY_PID=$pid
ENV
  cat "$dir/env"
}

registry_stop() {
  local dir="${1:?registry_stop DIR}" pid
  pid="$(cat "$dir/registry.pid" 2>/dev/null)" || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/registry.pid"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    ensure) registry_ensure ;;
    start) registry_start "${2:?usage: registry.sh start DIR}" ;;
    stop) registry_stop "${2:?usage: registry.sh stop DIR}" ;;
    *) echo "usage: scripts/lib/registry.sh ensure | start DIR | stop DIR" >&2; exit 2 ;;
  esac
fi
