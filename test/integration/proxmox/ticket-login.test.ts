// username/password clusters (upstream's ticket login) through the real HTTP adapter against the
// simulator: the whole CSI chain works, writes carry the CSRF token, a wrong password is a clear
// FAILED_PRECONDITION, the ticket is renewed before it expires, and an expired ticket is
// replaced without failing the call.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../src/csi/types.js';
import { isCsiError } from '../../../src/errors.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { createProxmoxController } from '../../../src/proxmox/controller/controller.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { SimulatorAdmin, startSimulator, type RunningSimulator } from '../../../sim/index.js';
import { CONTROLLER_METHODS, implemented } from '../../helpers/implemented.js';
import { present } from '../../helpers/present.js';

// Short enough to test expiry, long enough that a loaded machine finishes a whole create →
// publish → delete (and a renewal) inside one ticket's life.
const LIFETIME_S = 5;
const sim: RunningSimulator = await startSimulator({
  backend: 'none',
  ticketLifetimeSeconds: LIFETIME_S,
  faults: { authFailureDelayMs: 0, taskDurationMs: 5, lockTimeoutMs: 1000 },
});
t.teardown(() => sim.close());
const admin = new SimulatorAdmin(sim.adminUrl);
const cluster = (password = present(sim.password, 'the simulator password')) => ({
  url: sim.url,
  insecure: false,
  caFile: sim.caFile,
  username: present(sim.username, 'the simulator user name'),
  password,
  region: 'homelab',
});
const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: AbortSignal.timeout(30_000) });

async function ticketCalls(since: number): Promise<string[]> {
  const { entries } = await admin.requests(since);
  return entries.map(
    (e) =>
      `${e.method} ${e.path.replace('/api2/json', '')}${e.params?.password ? ` ${e.params.password}` : ''} ${e.status}`,
  );
}
const lastSeq = async () => (await admin.requests(0)).lastSeq;

t.test('the controller creates, publishes and deletes a volume with ticket login', async (t) => {
  const c = implemented(
    createProxmoxController({
      config: { clusters: [cluster()], controllerVmId: 9999 },
      log: pino({ level: 'silent' }),
      queryTimeoutMs: 10_000,
    }),
    CONTROLLER_METHODS,
  );
  t.teardown(() => c.close());
  const mount: T.VolumeCapability = {
    mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
    accessType: 'mount',
  };
  const created = await c.createVolume(
    {
      name: 'pvc-ticket-1',
      capacityRange: { requiredBytes: String(GiB), limitBytes: '0' },
      volumeCapabilities: [mount],
      parameters: { storage: 'local-lvm' },
      secrets: {},
      volumeContentSource: null,
      accessibilityRequirements: {
        requisite: [
          { segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } },
        ],
        preferred: [],
      },
      mutableParameters: {},
    },
    ctx(),
  );
  const volumeId = present(created.volume?.volumeId, 'CreateVolume: volume id');
  await c.controllerPublishVolume(
    {
      volumeId,
      nodeId: 'talos-worker-1',
      volumeCapability: mount,
      readonly: false,
      secrets: {},
      volumeContext: {},
    },
    ctx(),
  );
  await c.controllerUnpublishVolume({ volumeId, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  await c.deleteVolume({ volumeId, secrets: {} }, ctx());
  const { entries } = await admin.requests(0);
  const logins = entries.filter((e) => e.path.endsWith('/access/ticket'));
  t.equal(logins.length, 1, 'one login serves every call');
  t.ok(
    entries.some((e) => e.method !== 'GET' && e.status === 200 && e.tokenId === sim.username),
    'writes ran as the ticket user (CSRF token accepted)',
  );
  t.notOk(
    entries.some((e) => e.status === 401),
    'no call was refused',
  );
});

t.test('a wrong password is FAILED_PRECONDITION naming the cause and what to check', async (t) => {
  const api = createHttpProxmoxApi({ cluster: cluster('not-the-password') });
  t.teardown(() => api.close());
  const err = await api.version().catch((e: unknown) => e);
  t.ok(isCsiError(err));
  t.match(err, {
    kind: 'FailedPrecondition',
    message: /login as kubernetes-csi@pve failed \(authentication failure\); check username and password/,
  });
});

t.test('the ticket is renewed (ticket as password) once it is older than the renewal age', async (t) => {
  const api = createHttpProxmoxApi({ cluster: cluster(), ticketRenewAfterMs: 1000 });
  t.teardown(() => api.close());
  const since = await lastSeq();
  await api.version();
  await new Promise((r) => setTimeout(r, 1100));
  await api.version();
  await api.version();
  t.same(await ticketCalls(since), [
    'POST /access/ticket (password) 200',
    'GET /version 200',
    'POST /access/ticket (ticket) 200',
    'GET /version 200',
    'GET /version 200',
  ]);
});

t.test('an expired ticket is replaced and the call still succeeds, writes included', async (t) => {
  const api = createHttpProxmoxApi({ cluster: cluster() });
  t.teardown(() => api.close());
  await api.version();
  await new Promise((r) => setTimeout(r, (LIFETIME_S + 1.2) * 1000));
  const since = await lastSeq();
  const volid = await api.allocDisk('hyper2', 'local-lvm', {
    vmid: 9999,
    filename: 'vm-9999-ticket-expired',
    sizeBytes: GiB,
  });
  t.equal(volid, 'local-lvm:vm-9999-ticket-expired');
  t.same(
    await ticketCalls(since),
    [
      'POST /nodes/hyper2/storage/local-lvm/content 401',
      'POST /access/ticket (password) 200',
      'POST /nodes/hyper2/storage/local-lvm/content 200',
    ],
    'refused before it ran, then sent once more with a fresh ticket',
  );
  await api.freeDisk('hyper2', 'local-lvm', volid);
});
