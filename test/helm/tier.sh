#!/usr/bin/env bash
# Chart tests: installs helm into .tools/ when it is missing (or another version), lints the
# chart with its defaults and with the seed cluster's values, renders both, then runs the tap
# checks of the rendered objects (test/helm/*.test.ts). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/lib/ensure.sh
CHART=charts/pve-nfs-csi
SEED=test/helm/seed-values.yaml
OUT=.cache/helm/rendered
# A helm built by `go install` reports Kubernetes v1.20 unless told otherwise (release builds
# set the version at link time); the chart requires a newer cluster.
KUBE_VERSION=v1.33.0

# Keep helm's cache and config out of the user's home.
export HELM_CACHE_HOME="$PWD/.cache/helm/cache"
export HELM_CONFIG_HOME="$PWD/.cache/helm/config"
export HELM_DATA_HOME="$PWD/.cache/helm/data"

ensure_helm

echo "helm-test: helm lint (defaults)"
"$HELM" lint --strict --kube-version "$KUBE_VERSION" "$CHART"
echo "helm-test: helm lint (seed values)"
"$HELM" lint --strict --kube-version "$KUBE_VERSION" --values "$SEED" "$CHART"
# The chart's own values.yaml under the schema in each driver's half of the seed setup, and
# with every optional object on (ServiceMonitor, node metrics Service, PodDisruptionBudget).
for only in "nfs.enabled=false" "proxmox.enabled=false"; do
  echo "helm-test: helm lint (seed values, $only)"
  "$HELM" lint --strict --kube-version "$KUBE_VERSION" --values "$SEED" --set "$only" "$CHART"
done
echo "helm-test: helm lint (optional objects on)"
"$HELM" lint --strict --kube-version "$KUBE_VERSION" --values "$SEED" \
  --set metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true,metrics.nodeAddress=hostIP,controller.replicas=3 "$CHART"

mkdir -p "$OUT"
"$HELM" template pve-nfs-csi "$CHART" --namespace csi-storage --kube-version "$KUBE_VERSION" >"$OUT/defaults.yaml"
"$HELM" template pve-nfs-csi "$CHART" --namespace csi-proxmox --kube-version "$KUBE_VERSION" \
  --values "$SEED" >"$OUT/seed.yaml"
echo "helm-test: rendered $(grep -c '^kind:' "$OUT/defaults.yaml") objects (defaults) and" \
  "$(grep -c '^kind:' "$OUT/seed.yaml") (seed) into $OUT/"

# The PrometheusRule's alerts under promtool's rule unit tests (series that must fire and that
# must not): the rules as the chart renders them with the seed values, beside the test file.
source scripts/lib/promtool.sh
ensure_promtool
PROM=.cache/helm/promtool
mkdir -p "$PROM"
cp test/helm/alerts.promtool.yaml "$PROM/"
"$HELM" template pve-nfs-csi "$CHART" --namespace csi-proxmox --kube-version "$KUBE_VERSION" --values "$SEED" \
  --set metrics.prometheusRule.enabled=true --show-only templates/prometheusrule.yaml |
  node test/helm/rule-spec.mjs >"$PROM/rules.yaml"
echo "helm-test: promtool check rules + test rules ($PROMTOOL_VERSION)"
"$PROMTOOL" check rules "$PROM/rules.yaml"
"$PROMTOOL" test rules "$PROM/alerts.promtool.yaml"

HELM="$HELM" npx tap --disable-coverage test/helm/chart.test.ts test/helm/values.test.ts test/helm/schema-params.test.ts test/helm/preflight.test.ts test/helm/archives.test.ts test/helm/observability.test.ts test/helm/snapshots.test.ts
