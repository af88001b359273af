// An NFS PV whose directory is gone is a finding of `report` (pv-missing-dir) and so a gauge of
// the controller's findings metrics: both come from one check (src/cli/report/missing-dirs.ts).
import t from 'tap';
import pino from 'pino';
import { checkPvDirs } from '../../../src/cli/report/missing-dirs.js';
import { findingsMetrics } from '../../../src/metrics/findings.js';
import type { NfsStat, NfsStore, NfsStores } from '../../../src/nfs/controller/store/store.js';
import { dynamicNfsPv, kube } from '../cli/day2-fixtures.js';

const SERVER = '127.0.0.1';
const SHARE = '/export';
const dirStat = { type: 'directory' } as unknown as NfsStat;

/** Stores whose one share holds the directories `present`; `fail` makes every stat fail. */
function stores(present: readonly string[], fail?: Error): NfsStores {
  const store: Pick<NfsStore, 'stat'> = {
    stat: async (p: string) => {
      if (fail) throw fail;
      return present.includes(p) ? dirStat : null;
    },
  };
  return { open: () => store as NfsStore } as unknown as NfsStores;
}

const pvs = [
  dynamicNfsPv('pvc-kept', SERVER, SHARE, 'apps/kept'),
  dynamicNfsPv('pvc-gone', SERVER, SHARE, 'apps/gone'),
];

t.test('checkPvDirs: a PV whose directory is missing, and none for one that is there', async (t) => {
  const f = await checkPvDirs(pvs, stores(['apps/kept']), AbortSignal.timeout(5000));
  t.same(
    f.map((x) => [x.kind, x.where, x.what]),
    [['pv-missing-dir', `${SERVER}:${SHARE}`, 'PV pvc-gone']],
  );
  t.match(f[0]?.detail, /apps\/gone does not exist/);
});

t.test('checkPvDirs: a share that does not answer is an error, not a missing directory', async (t) => {
  const f = await checkPvDirs(pvs, stores([], new Error('NFS3ERR_IO')), AbortSignal.timeout(5000));
  t.same(
    f.map((x) => x.kind),
    ['error', 'error'],
  );
  t.match(f[0]?.detail, /cannot check its directory: NFS3ERR_IO/);
});

t.test('the findings metrics count pv-missing-dir as report lists it', async (t) => {
  const m = findingsMetrics({
    kube: async () => kube({ pvs }),
    stores: stores(['apps/kept']),
    log: pino({ level: 'silent' }),
    intervalMs: 60_000,
    callsPerMinute: 30,
  });
  await m.refresh();
  const gauge = m
    .snapshot()
    .filter((s) => s.name === 'pve_csi_findings' && s.labels.kind === 'pv-missing-dir')
    .map((s) => [s.labels.where, s.value]);
  t.same(gauge, [[`${SERVER}:${SHARE}`, 1]], 'pve_csi_findings{kind="pv-missing-dir"}');
  t.equal(m.snapshot().find((s) => s.name === 'pve_csi_findings_up')?.value, 1, 'a complete refresh');
});
