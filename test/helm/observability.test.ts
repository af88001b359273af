// The opt-in observability objects: the PrometheusRule (its alerts are tested by promtool in
// test/helm/tier.sh) and the Grafana dashboard ConfigMap. Every metric a dashboard panel or an
// alert names must be one the program exports: the names come from the real metrics registry
// (src/server/metrics.ts with the gauges of the pool view, the findings and the NFS volume usage registered), not from
// a list kept here.
import t from 'tap';
import { Metrics } from '../../src/server/metrics.js';
import { POOL_GAUGES } from '../../src/proxmox/controller/pool-metrics.js';
import { FINDINGS_GAUGES } from '../../src/metrics/findings.js';
import { KIND_CLASS, type Kind } from '../../src/cli/report/findings.js';
import { NFS_USAGE_GAUGES } from '../../src/nfs/node/usage.js';
import { render, SEED_VALUES, type K8sObject } from './helm.js';

/** Metrics of another exporter the NFS soft-quota alert joins (kube-state-metrics: the claim's size and name). */
const EXTERNAL = new Set(['kube_persistentvolume_capacity_bytes', 'kube_persistentvolume_claim_ref']);

/** Every series name the program's /metrics can carry. */
async function exportedNames(): Promise<Set<string>> {
  const m = new Metrics(true);
  for (const defs of [POOL_GAUGES, FINDINGS_GAUGES, NFS_USAGE_GAUGES]) m.addGauges({ defs, snapshot: () => [] });
  const names = new Set<string>();
  for (const metric of await m.registry.getMetricsAsJSON()) {
    names.add(metric.name);
    if (String(metric.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(metric.name + s);
  }
  return names;
}

const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'and',
  'or',
  'unless',
  'bool',
  'offset',
]);

/** The metric names a PromQL expression selects (not functions, labels, keywords or durations). */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\w+/g, ' ');
  return [...bare.matchAll(/\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?/g)]
    .filter((m) => !m[2] && !KEYWORDS.has(m[1] ?? '') && !/^\d/.test(m[1] ?? ''))
    .map((m) => m[1] ?? '');
}

const dashboardOf = (objs: K8sObject[]) =>
  objs.find((o) => o.kind === 'ConfigMap' && o.metadata.labels?.grafana_dashboard === '1');

interface Panel {
  title: string;
  type: string;
  targets?: Array<{ expr: string }>;
}

t.test('the name reader: selectors, not functions, labels or keywords', async (t) => {
  t.same(
    metricNames(
      'histogram_quantile(0.95, sum by (driver, le) (rate(csi_a_bucket{method=~"X|Y"}[$__rate_interval]))) / on (x) group_left (y) b_total > 0.5 and c',
    ),
    ['csi_a_bucket', 'b_total', 'c'],
  );
  const names = await exportedNames();
  t.ok(
    names.has('csi_operation_duration_seconds_bucket') && names.has('csi_backend_up'),
    'the registry has the RPC metrics',
  );
  t.ok(names.has('pve_csi_pool_used_bytes') && names.has('pve_csi_findings'), 'and the pool and findings gauges');
  t.notOk(names.has('pve_csi_pool_fill_ratio'), 'and nothing it does not export');
});

const RULE_API = 'monitoring.coreos.com/v1/PrometheusRule';
const MONITOR_API = 'monitoring.coreos.com/v1/ServiceMonitor';
const ruleOf = (objs: K8sObject[]) => objs.find((o) => o.kind === 'PrometheusRule');
const alertNames = (rule: K8sObject | undefined) =>
  ((rule?.spec as { groups?: { rules: { alert: string }[] }[] } | undefined)?.groups ?? []).flatMap((g) =>
    g.rules.map((r) => r.alert),
  );

t.test('auto by default: rendered where the cluster serves the prometheus-operator API', async (t) => {
  const none = render({ valuesFiles: [SEED_VALUES] }).objects;
  t.equal(dashboardOf(none), undefined, 'no dashboard without the API');
  t.equal(ruleOf(none), undefined, 'no PrometheusRule without its CRD');
  const served = render({ valuesFiles: [SEED_VALUES], apiVersions: [RULE_API, MONITOR_API] }).objects;
  t.ok(dashboardOf(served), 'the dashboard where ServiceMonitors are served');
  t.ok(ruleOf(served), 'the PrometheusRule where its CRD is served');
  t.notOk(ruleOf(render({ apiVersions: [MONITOR_API] }).objects), 'the rule follows its own CRD');
  const off = render({
    apiVersions: [RULE_API, MONITOR_API],
    set: ['metrics.prometheusRule.enabled=false', 'metrics.dashboard.enabled=false'],
  }).objects;
  t.equal(ruleOf(off), undefined, 'false decides regardless');
  t.equal(dashboardOf(off), undefined);
  const on = render({ set: ['metrics.prometheusRule.enabled=true', 'metrics.dashboard.enabled=true'] }).objects;
  t.ok(ruleOf(on) && dashboardOf(on), 'true decides regardless');
  t.equal(
    ruleOf(render({ set: ['metrics.prometheusRule.enabled=true', 'metrics.enabled=false'] }).objects),
    undefined,
    'metrics.enabled false turns it off',
  );
});

t.test('the archive alert is on whenever the NFS driver (and its default onDelete: archive) is', async (t) => {
  t.ok(alertNames(ruleOf(render({ apiVersions: [RULE_API] }).objects)).includes('PveCsiArchivesPastRetention'));
  const noNfs = alertNames(ruleOf(render({ apiVersions: [RULE_API], set: ['nfs.enabled=false'] }).objects));
  t.ok(noNfs.includes('PveCsiBackendDown'), 'the rule is there without NFS');
  t.notOk(noNfs.includes('PveCsiArchivesPastRetention'), 'but not the archive alert');
});

t.test('the dashboard: sidecar label, valid JSON, every query names exported metrics', async (t) => {
  const objs = render({ valuesFiles: [SEED_VALUES], set: ['metrics.dashboard.enabled=true'] }).objects;
  const cm = dashboardOf(objs);
  if (!cm) throw new Error('no dashboard ConfigMap rendered');
  const data = cm.data as Record<string, string>;
  const dash = JSON.parse(data['pve-nfs-csi.json'] ?? '') as { uid: string; panels: Panel[] };
  t.equal(dash.uid, 'pve-nfs-csi');
  const names = await exportedNames();
  const queried = new Set<string>();
  for (const p of dash.panels) {
    for (const target of p.targets ?? []) {
      for (const n of metricNames(target.expr)) {
        queried.add(n);
        t.ok(names.has(n), `panel "${p.title}": ${n} is exported`);
      }
    }
  }
  // What the issue asks the dashboard to show.
  for (const n of [
    'csi_operation_duration_seconds_count',
    'csi_operation_duration_seconds_bucket',
    'csi_operation_errors_total',
    'pve_csi_pool_used_bytes',
    'pve_csi_pool_guard_limit',
    'pve_csi_pool_overcommit_ratio',
    'pve_csi_findings',
    'pve_csi_nfs_archives',
    'pve_csi_nfs_volume_used_bytes',
    'csi_backend_up',
  ])
    t.ok(queried.has(n), `a panel shows ${n}`);
});

t.test('the PrometheusRule: every alert has a runbook and names exported metrics', async (t) => {
  const objs = render({ valuesFiles: [SEED_VALUES], set: ['metrics.prometheusRule.enabled=true'] }).objects;
  const rule = objs.find((o) => o.kind === 'PrometheusRule');
  if (!rule) throw new Error('no PrometheusRule rendered');
  const names = await exportedNames();
  const groups = (
    rule.spec as {
      groups: Array<{ rules: Array<{ alert: string; expr: string; annotations: Record<string, string> }> }>;
    }
  ).groups;
  const alerts = groups.flatMap((g) => g.rules);
  t.ok(alerts.length >= 9, `${alerts.length} alerts`);
  for (const a of alerts) {
    t.match(
      a.annotations.runbook,
      /pve-nfs-csi (report|archives|preflight)|kubectl|report --fix/,
      `${a.alert}: a runbook with a command`,
    );
    for (const n of metricNames(a.expr)) t.ok(names.has(n) || EXTERNAL.has(n), `${a.alert}: ${n} is exported`);
  }
});

t.test('every finding kind reaches the alert of its class, and information reaches none', async (t) => {
  const objs = render({ valuesFiles: [SEED_VALUES], set: ['metrics.prometheusRule.enabled=true'] }).objects;
  const rule = objs.find((o) => o.kind === 'PrometheusRule');
  if (!rule) throw new Error('no PrometheusRule rendered');
  const alerts = (rule.spec as { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> }).groups.flatMap(
    (g) => g.rules,
  );
  // The kinds an alert's pve_csi_findings selector matches (kind="x" or kind=~"a|b").
  const matched = (expr: string): string[] =>
    [...expr.matchAll(/pve_csi_findings\{[^}]*\bkind(=~|=)"([^"]*)"/g)].flatMap((m) =>
      m[1] === '=' ? [m[2] ?? ''] : (m[2] ?? '').split('|'),
    );
  const byKind = new Map<string, string[]>();
  for (const a of alerts) for (const k of matched(a.expr)) byKind.set(k, [...(byKind.get(k) ?? []), a.alert]);
  const alertOf = {
    leftover: ['PveCsiLeftovers'],
    volume: ['PveCsiVolumeBackingMismatch'],
    pending: ['PveCsiPendingChangeStuck'],
    info: [],
    // A failed read sets pve_csi_findings_up to 0 (src/metrics/findings-collect.ts), which PveCsiFindingsStale watches.
    error: [],
  } as const;
  for (const [kind, cls] of Object.entries(KIND_CLASS) as [Kind, keyof typeof alertOf][])
    t.strictSame(byKind.get(kind) ?? [], alertOf[cls], `${kind} (${cls})`);
  for (const k of byKind.keys()) t.ok(k in KIND_CLASS, `the alerts name only kinds report makes: ${k}`);
  t.ok(
    alerts.some((a) => a.alert === 'PveCsiFindingsStale' && a.expr.includes('pve_csi_findings_up == 0')),
    'a failed read (kind error) reaches PveCsiFindingsStale',
  );
});
