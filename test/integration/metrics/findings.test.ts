// The findings metrics on the simulator: their values are the findings `report --json` lists on
// the same state (the report's own gather and judge functions, its JSON form), and the Proxmox
// calls a refresh says it made are the calls the simulator counted.
import t from 'tap';
import pino from 'pino';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { readCluster, type KubeFacts } from '../../../src/cli/report/facts.js';
import { proxmoxFindings, type Finding } from '../../../src/cli/report/findings.js';
import { findingsMetrics, nextDelayMs } from '../../../src/metrics/findings.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { callCtx, capacity, createReq, preferZone } from '../../helpers/csi-requests.js';
import { CONTROLLER_VMID, REGION, startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';

const UID = (n: number) => `pvc-0000000${n}-0000-4000-8000-000000000000`;

t.test('findings metrics match report --json, at the calls the simulator counted', async (t) => {
  const { c, admin, cluster } = await startProxmoxOnSim(t);
  const log = pino({ level: 'silent' });
  for (const [n, host] of [
    [1, 'hyper1'],
    [2, 'hyper1'],
    [3, 'hyper2'],
  ] as const)
    await c.createVolume(
      createReq(UID(n), { capacityRange: capacity(GiB), accessibilityRequirements: preferZone(host) }),
      callCtx(),
    );
  // Volume 3 has its PV; 1 and 2 are leftovers (no PV names them).
  const kube: KubeFacts = {
    pvs: [
      {
        metadata: { name: UID(3) },
        spec: {
          csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: `${REGION}/hyper2/local-lvm/vm-9999-${UID(3)}` },
        },
        status: { phase: 'Bound' },
      },
    ],
    pvcs: [],
    attachments: [],
    classes: [],
  };
  const m = findingsMetrics({
    proxmox: c.inspect,
    kube: async () => kube,
    log,
    intervalMs: 60_000,
    callsPerMinute: 30,
  });
  await admin.resetCounters();
  const calls = await m.refresh();
  const counted = (await admin.counters()).total;
  t.equal(calls, counted, `the refresh counted its Proxmox calls: ${calls} (simulator: ${counted})`);
  t.ok(calls > 0 && calls < 30, 'one refresh fits a minute of the default budget');

  // What `report --json` prints for the same state: the same functions, through its JSON form.
  const api = createHttpProxmoxApi({ cluster, queryTimeoutMs: 10_000 });
  t.teardown(() => api.close());
  const facts = await readCluster(REGION, api, CONTROLLER_VMID, log);
  const report = JSON.parse(
    JSON.stringify({
      findings: proxmoxFindings(facts, kube, { controllerVmId: CONTROLLER_VMID, graceMs: 3_600_000, now: Date.now() }),
    }),
  ) as { findings: Finding[] };
  const want = new Map<string, number>();
  for (const f of report.findings) want.set(`${f.kind} ${f.where}`, (want.get(`${f.kind} ${f.where}`) ?? 0) + 1);
  const got = new Map(
    m
      .snapshot()
      .flatMap((s) =>
        s.name === 'pve_csi_findings' ? [[`${s.labels.kind} ${s.labels.where}`, s.value] as const] : [],
      ),
  );
  t.same(Object.fromEntries(got), Object.fromEntries(want), 'pve_csi_findings = the report, by kind and place');
  t.equal(got.get(`orphan-disk ${REGION}/hyper1`), 2, 'two leftover disks on hyper1');
  const bytes = m.snapshot().find((s) => s.name === 'pve_csi_findings_bytes' && s.labels.kind === 'orphan-disk');
  t.equal(bytes?.value, 2 * GiB, 'their size');
  t.equal(m.snapshot().find((s) => s.name === 'pve_csi_findings_up')?.value, 1);
});

t.test('the budget holds for any minute', async (t) => {
  const now = 1_000_000;
  t.equal(nextDelayMs([], 10, 60_000, 30, now), 60_000, 'the interval, when the budget has room');
  t.equal(nextDelayMs([], 90, 60_000, 30, now), 180_000, 'a refresh above the budget: 3 minutes for 90 calls');
  // Refreshes of 11 calls ended 40 s, 20 s and 0 s ago (33 calls): one more passes 30 until the
  // first two left the minute.
  const h = [
    { at: now - 40_000, calls: 11 },
    { at: now - 20_000, calls: 11 },
    { at: now, calls: 11 },
  ];
  t.equal(nextDelayMs(h, 11, 0, 30, now), 40_000, 'waits until 11 more fit the last minute');
  // Simulated over 10 minutes: no minute window holds more than the budget.
  const ends: Array<{ at: number; calls: number }> = [];
  for (let at = 0; at < 600_000;) {
    ends.push({ at, calls: 11 });
    at += nextDelayMs(ends, 11, 1000, 30, at);
  }
  for (const e of ends) {
    const inMinute = ends.filter((x) => x.at > e.at - 60_000 && x.at <= e.at).reduce((n, x) => n + x.calls, 0);
    t.ok(inMinute <= 30, `minute ending at ${e.at / 1000} s: ${inMinute} calls`);
  }
});
