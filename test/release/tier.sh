#!/usr/bin/env bash
# The release tier (`npm test` phases; docs/release.md):
#
#   test/release/tier.sh lint       actionlint (+ shellcheck on their run: blocks) on
#                                      .github/workflows/*.yml; actionlint built from its Go
#                                      module into $CACHE/actionlint-<version>
#   test/release/tier.sh [registry] a real registry on 127.0.0.1 with TLS from a test CA
#                                      (scripts/lib/registry.sh); release N-1 (the tree of commit
#                                      $PREV_COMMIT, built by scripts/release.sh's steps) and N
#                                      (this tree, `npm run release`) pushed to it; then
#                                      test/release/registry.test.ts (pull, labels, digest, chart)
#                                      and test/release/readme-install.test.ts (README's Install
#                                      steps as written, against this registry)
#   test/release/tier.sh upgrade    the same, then test/release/upgrade.test.ts too: `helm
#                                      install oci://…` N-1 into the k8s tier's cluster, volumes of
#                                      both drivers, `helm upgrade` to N, `helm rollback`
# Prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
source scripts/lib/containers.sh
source scripts/lib/registry.sh

ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
# Release N-1 for the upgrade test: a fixed older commit (its package.json says 0.1.0).
PREV_COMMIT="${PREV_COMMIT:-26a5d75ea3627e1195b70c121c5e708e0afaf178}"
what="${1:-registry}"

if [ "$what" = lint ]; then
  ensure_apt shellcheck
  bin="$CACHE/actionlint-$ACTIONLINT_VERSION/actionlint"
  if [ ! -x "$bin" ]; then
    GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="${bin%/*}" nice -n 10 \
      go install -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" >&2
  fi
  "$bin" -shellcheck "$(command -v shellcheck)" .github/workflows/*.yml
  echo "actionlint $ACTIONLINT_VERSION: $(ls .github/workflows/*.yml | wc -l) workflows clean"
  exit 0
fi

t0=$SECONDS
ensure_node_modules
ensure_helm
containers_env
work="$(mktemp -d /tmp/pnc-release-XXXXXX)"
cleanup() { registry_stop "$work/registry"; rm -rf "$work"; }
trap cleanup EXIT
t=$SECONDS
registry_start "$work/registry" >/dev/null
source "$work/registry/env"
export REGISTRY_CA REGISTRY_CERT_DIR
echo "release-test: registry $REGISTRY up in $((SECONDS-t)) s (distribution $REGISTRY_VERSION, TLS from a test CA)"

# N-1: the older commit's tree, built and pushed with this script's steps. Its image does not
# change, so a build kept in the container storage is reused (--reuse: same revision label).
t=$SECONDS
mkdir -p "$work/prev"
git archive "$PREV_COMMIT" | tar -x -C "$work/prev"
bash scripts/release.sh --source "$work/prev" --revision "$PREV_COMMIT" --reuse \
  --registry "$REGISTRY/pve-nfs-csi" --out "$work/out-prev" >/dev/null
echo "release-test: N-1 $(grep ^VERSION= "$work/out-prev/release.env") (${PREV_COMMIT:0:7}) pushed in $((SECONDS-t)) s"
t=$SECONDS
bash scripts/release.sh --registry "$REGISTRY/pve-nfs-csi" --out "$work/out-next" >/dev/null
echo "release-test: N $(grep ^VERSION= "$work/out-next/release.env") (this tree) built and pushed in $((SECONDS-t)) s"

export RELEASE_REGISTRY_DIR="$work/registry" RELEASE_PREV_DIR="$work/out-prev" RELEASE_NEXT_DIR="$work/out-next"
files=(test/release/registry.test.ts test/release/readme-install.test.ts)
if [ "$what" = upgrade ]; then
  bash scripts/k8s-build.sh etcd csi-provisioner csi-attacher csi-resizer kube-apiserver kube-controller-manager >/dev/null
  files+=(test/release/upgrade.test.ts)
fi
npx tap --disable-coverage --timeout 900 "${files[@]}"
echo "release-test: done in $((SECONDS-t0)) s"
