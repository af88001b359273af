// A findings refresh that fails (here the Kubernetes lists; at start too) is a gauge and a log
// line: the loop goes on, the last findings stay, marked not up, and nothing is thrown at the
// process that serves CSI.
import t from 'tap';
import pino from 'pino';
import { findingsMetrics } from '../../../src/metrics/findings.js';
import { kube } from '../cli/day2-fixtures.js';

t.test('a failed refresh counts, logs and keeps the last findings', async (t) => {
  let fail = true;
  const lines: string[] = [];
  const log = pino({ level: 'warn' }, { write: (l: string) => void lines.push(l) });
  const m = findingsMetrics({
    kube: async () => {
      if (fail) throw new Error('the API server is away');
      return kube();
    },
    log,
    intervalMs: 60_000,
    callsPerMinute: 30,
  });
  const value = (name: string) => m.snapshot().find((s) => s.name === name)?.value;
  m.start();
  t.teardown(() => m.stop());
  for (let i = 0; i < 100 && value('pve_csi_findings_refresh_failures') === undefined; i++)
    await new Promise((r) => setTimeout(r, 10));
  t.equal(value('pve_csi_findings_refresh_failures'), 1, 'the first refresh at start failed: counted');
  t.equal(value('pve_csi_findings_up'), 0, 'and not up');
  t.match(lines.join(''), /refresh failed.*the API server is away|the API server is away.*refresh failed/);
  fail = false;
  await m.refresh();
  t.equal(value('pve_csi_findings_up'), 1, 'the next refresh is up again');
  t.equal(value('pve_csi_findings_refresh_failures'), 1, 'failures since start stay counted');
  t.ok((value('pve_csi_findings_refresh_seconds') ?? -1) >= 0, 'its duration is a gauge');
});
