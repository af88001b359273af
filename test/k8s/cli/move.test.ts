// `pve-nfs-csi move` against a real etcd + kube-apiserver + kube-controller-manager (the PV
// binder and the protection controllers bind and release the claims for real) and the Proxmox
// simulator with file-backed volumes (the migration copies the bytes). The disk and the claim
// are made the way a static PV is: no provisioner is needed to have a bound Proxmox volume.
//  - the CLI: dry run (plan, exit 1), --json, the move (exit 0), re-run (exit 0, already there);
//  - refusals (exit 4, nothing changed): attached (a VolumeAttachment), used by a pod, unknown
//    zone, NFS volume, missing Proxmox privileges, a disk of that name on the target;
//  - a failed migration rolls back; a migration that leaves the source copy has it freed after
//    the bind;
//  - a "crash" at every checkpoint of a move (the run freezes there for good, as after kill -9),
//    then a fresh run: the claim ends bound on the target, the disk exists exactly once with the
//    bytes written before, the old PV and the helper VM are gone;
//  - a real SIGKILL of the CLI process during the migration, then the same command again.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import t from 'tap';
import { stringify } from 'yaml';
import { SimulatorAdmin, startSimulator } from '../../../sim/index.js';
import { MOVER, defaultConfig } from '../../../sim/test/fixtures/helpers.js';
import { move } from '../../../src/cli/move/command.js';
import { openKube } from '../../../src/k8s/index.js';
import { moveKube } from '../../../src/cli/move/kube-adapter.js';
import { startOrResume } from '../../../src/cli/move/start.js';
import type { PersistentVolume, PersistentVolumeClaim, VolumeAttachment } from '../../../src/cli/move/kube-port.js';
import type { MoveDeps } from '../../../src/cli/move/run.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { ROOT, binaries, startCluster } from '../lib/cluster.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-move-'));
const cluster = await startCluster(dir, binaries(['etcd', 'kube-apiserver', 'kube-controller-manager']));
const simCfg = defaultConfig();
simCfg.tokens.push(MOVER);
const sim = await startSimulator({
  config: simCfg,
  backend: 'qmp',
  qmp: {},
  faults: { authFailureDelayMs: 0, taskDurationMs: 20 },
});
const admin = new SimulatorAdmin(sim.adminUrl);
t.teardown(async () => {
  await sim.close();
  await cluster.stop();
  if (t.passing()) fs.rmSync(dir, { recursive: true, force: true });
});

const proxmoxCluster = (token: { id: string; secret: string }) => ({
  url: sim.url.replace(/\/api2\/json$/, ''),
  token_id: token.id,
  token_secret: token.secret,
  region: 'homelab',
  ca_file: sim.caFile,
});
/** The Proxmox API client as the mover token, the way `move` talks to the cluster. */
const moverApi = () =>
  createHttpProxmoxApi({
    cluster: {
      url: proxmoxCluster(MOVER).url,
      tokenId: MOVER.id,
      tokenSecret: MOVER.secret,
      region: 'homelab',
      caFile: sim.caFile,
      insecure: false,
    },
  });
const configFile = path.join(dir, 'config.yaml');
fs.writeFileSync(configFile, stringify({ clusters: [proxmoxCluster(MOVER)] }));
const csiConfigFile = path.join(dir, 'config-csi.yaml');
fs.writeFileSync(
  csiConfigFile,
  stringify({ clusters: [proxmoxCluster({ id: sim.tokenId, secret: sim.tokenSecret })] }),
);

const k = await openKube({ kubeconfig: cluster.adminConfig, env: {} });
const kube = cluster.kube;
const NS = 'apps';
await kube.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });

async function cli(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = new PassThrough();
  const err = new PassThrough();
  const chunks = { out: '', err: '' };
  out.on('data', (c: Buffer) => (chunks.out += c.toString()));
  err.on('data', (c: Buffer) => (chunks.err += c.toString()));
  const code = await move.run([...args, '--kubeconfig', cluster.adminConfig, '--config', configFile], {
    out,
    err,
    env: {},
  });
  return { code, ...chunks };
}

interface Vol {
  volid: string;
  file: string | null;
}
async function volumes(node: string): Promise<Vol[]> {
  const st = (await admin.state()) as { nodes: Array<{ name: string; storages: Array<{ volumes: Vol[] }> }> };
  return (st.nodes.find((n) => n.name === node)?.storages ?? [])
    .flatMap((s) => s.volumes)
    .filter((v) => v.volid.includes('pvc-'));
}
async function helperVm(): Promise<unknown> {
  const st = (await admin.state()) as { vms: Array<{ vmid: number }> };
  return st.vms.find((v) => v.vmid === 9999);
}
const pvcPath = (name: string) => `/api/v1/namespaces/${NS}/persistentvolumeclaims/${name}`;

let seq = 0;
/** A bound Proxmox claim on `zone` whose disk holds `data`, made as a static PV is. */
async function claim(
  zone = 'hyper1',
  data = `bytes of claim ${seq}`,
): Promise<{ name: string; pv: string; disk: string; data: string }> {
  const name = `data-${++seq}`;
  const pv = `pvc-0000${seq}-move`;
  const disk = `vm-9999-${pv}`;
  const api = moverApi();
  await api.allocDisk(zone, 'local-lvm', { vmid: 9999, filename: disk, sizeBytes: 16 * 2 ** 20 });
  await api.close();
  const file = (await volumes(zone)).find((v) => v.volid === `local-lvm:${disk}`)?.file;
  if (!file) throw new Error(`no file behind ${disk}`);
  fs.writeFileSync(file, data, { flag: 'r+' });
  await kube.create('/api/v1/persistentvolumes', {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: pv, annotations: { 'pv.kubernetes.io/provisioned-by': 'csi.proxmox.sinextra.dev' } },
    spec: {
      capacity: { storage: '16Mi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: 'proxmox-local',
      csi: {
        driver: 'csi.proxmox.sinextra.dev',
        volumeHandle: `homelab/${zone}/local-lvm/${disk}`,
        fsType: 'ext4',
        volumeAttributes: { storage: 'local-lvm' },
      },
      nodeAffinity: {
        required: {
          nodeSelectorTerms: [
            {
              matchExpressions: [
                { key: 'topology.kubernetes.io/region', operator: 'In', values: ['homelab'] },
                { key: 'topology.kubernetes.io/zone', operator: 'In', values: [zone] },
              ],
            },
          ],
        },
      },
    },
  });
  await kube.create(`/api/v1/namespaces/${NS}/persistentvolumeclaims`, {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name, namespace: NS, labels: { app: 'sonarr' }, annotations: { 'example.com/keep': 'me' } },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '16Mi' } },
      storageClassName: 'proxmox-local',
      volumeName: pv,
    },
  });
  await kube.waitFor(
    pvcPath(name),
    (o: PersistentVolumeClaim) => o.status?.phase === 'Bound',
    `claim ${name} bound`,
    60_000,
  );
  return { name, pv, disk, data };
}

/** What must hold after a finished move of `c` to hyper2. */
type Tt = Pick<typeof t, 'equal' | 'same' | 'notOk'>;
async function assertMoved(
  t: Tt,
  c: { name: string; pv: string; disk: string; data: string },
  from = 'hyper1',
  to = 'hyper2',
) {
  const pvc = await kube.get<PersistentVolumeClaim>(pvcPath(c.name));
  t.equal(pvc.status?.phase, 'Bound', 'the claim is bound');
  t.equal(pvc.metadata.labels?.app, 'sonarr', 'labels kept');
  t.equal(pvc.metadata.annotations?.['example.com/keep'], 'me', 'annotations kept');
  const newPv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${pvc.spec.volumeName}`);
  t.equal(
    newPv.spec.csi?.volumeHandle,
    `homelab/${to}/local-lvm/${c.disk}`,
    'handle names the target host, same disk name',
  );
  t.same(
    newPv.spec.nodeAffinity?.required?.nodeSelectorTerms[0]?.matchExpressions?.find(
      (e) => e.key === 'topology.kubernetes.io/zone',
    )?.values,
    [to],
  );
  t.equal(newPv.spec.persistentVolumeReclaimPolicy, 'Delete', 'reclaim policy restored');
  t.notOk(newPv.metadata.annotations?.['pve-nfs-csi.io/move'], 'no record left');
  t.equal(newPv.metadata.annotations?.['pve-nfs-csi.io/moved-from'], c.pv);
  t.equal(await kube.tryGet(`/api/v1/persistentvolumes/${c.pv}`), undefined, 'old PV gone');
  const src = (await volumes(from)).filter((v) => v.volid.includes(c.pv));
  const dst = (await volumes(to)).filter((v) => v.volid.includes(c.pv) || /vm-9999-disk-/.test(v.volid));
  t.same(src, [], 'nothing left on the source host');
  t.equal(dst.length, 1, 'exactly one copy on the target host');
  t.equal(
    fs
      .readFileSync(dst[0]?.file ?? '/nonexistent')
      .subarray(0, c.data.length)
      .toString(),
    c.data,
    'the bytes moved',
  );
  t.notOk(await helperVm(), 'helper VM gone');
}

t.test('dry run prints the plan and changes nothing; --yes moves; again is a no-op', async (t) => {
  const c = await claim();
  const before = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  const dry = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2');
  t.equal(dry.code, 1, 'a dry run with changes to make exits 1');
  t.match(dry.out, /migrate VM 9999 hyper1 -> hyper2 offline/);
  t.match(dry.out, /dry run: nothing changed/);
  const after = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  t.equal(after.metadata.resourceVersion, before.metadata.resourceVersion, 'the PV is untouched');
  const json = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--json');
  const plan = JSON.parse(json.out) as { action: string; to: string; newPv: string };
  t.equal(plan.action, 'plan');
  t.equal(plan.to, `homelab/hyper2/local-lvm/${c.disk}`);
  t.equal(plan.newPv, `${c.pv}-hyper2`);
  const done = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(done.code, 0, done.out + done.err);
  t.match(done.out, /scale its workload back up/);
  await assertMoved(t, c);
  const again = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes', '--json');
  t.equal(again.code, 0);
  t.equal((JSON.parse(again.out) as { action: string }).action, 'already-there');
  // and back again: the replacement's name follows the host, not the history
  const back = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper1', '--yes');
  t.equal(back.code, 0, back.out + back.err);
  const pvc = await kube.get<PersistentVolumeClaim>(pvcPath(c.name));
  t.equal(pvc.spec.volumeName, `${c.pv}-hyper1`);
});

t.test('refusals exit 4 and change nothing', async (t) => {
  const c = await claim();
  const unknown = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper9', '--yes');
  t.equal(unknown.code, 4);
  t.match(unknown.err, /unknown zone "hyper9": the hosts of cluster homelab are hyper1, hyper2, hyper3/);
  const same = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper1', '--yes');
  t.equal(same.code, 0, 'already there is success');

  const va = await kube.create<VolumeAttachment>('/apis/storage.k8s.io/v1/volumeattachments', {
    apiVersion: 'storage.k8s.io/v1',
    kind: 'VolumeAttachment',
    metadata: { name: `csi-move-${seq}` },
    spec: { attacher: 'csi.proxmox.sinextra.dev', nodeName: 'talos-worker-1', source: { persistentVolumeName: c.pv } },
  });
  const attached = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(attached.code, 4);
  t.match(
    attached.err,
    new RegExp(`is attached to talos-worker-1 \\(VolumeAttachment ${va.metadata.name}\\): scale the workload down`),
  );
  await kube.delete(`/apis/storage.k8s.io/v1/volumeattachments/${va.metadata.name}`);
  await kube
    .patch(`/apis/storage.k8s.io/v1/volumeattachments/${va.metadata.name}`, { metadata: { finalizers: null } })
    .catch(() => undefined);

  await kube.create(`/api/v1/namespaces/${NS}/pods`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `user-${seq}`, namespace: NS },
    spec: {
      containers: [{ name: 'c', image: 'busybox' }],
      volumes: [{ name: 'd', persistentVolumeClaim: { claimName: c.name } }],
    },
  });
  const used = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(used.code, 4);
  t.match(used.err, new RegExp(`is used by pod user-${seq}: scale the workload down first`));
  await kube.delete(`/api/v1/namespaces/${NS}/pods/user-${seq}`, { gracePeriodSeconds: 0 });

  // the disk in a VM config (a stale attachment) is refused too, naming the VM
  const api = moverApi();
  await api.updateVmConfig('hyper1', 111, { set: { scsi5: `local-lvm:${c.disk},backup=0` } });
  const inVm = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(inVm.code, 4);
  t.match(inVm.err, /is in the config of VM 111 \(talos-worker-1\) on hyper1 as scsi5/);
  await api.unlinkDisks('hyper1', 111, ['scsi5']);
  await api.close();

  const csi = await move.run(
    [`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes', '--kubeconfig', cluster.adminConfig, '--config', csiConfigFile],
    { out: new PassThrough(), err: Object.assign(new PassThrough(), {}), env: {} },
  );
  t.equal(csi, 4, 'the CSI role alone is refused before anything changes');

  await kube.create('/api/v1/persistentvolumes', {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: `nfs-${seq}` },
    spec: {
      capacity: { storage: '1Gi' },
      accessModes: ['ReadWriteMany'],
      persistentVolumeReclaimPolicy: 'Retain',
      storageClassName: 'syno-nfs-csi',
      csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `nas#/volume1/k8s#${NS}/nfs-${seq}##` },
    },
  });
  await kube.create(`/api/v1/namespaces/${NS}/persistentvolumeclaims`, {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: `nfs-${seq}`, namespace: NS },
    spec: {
      accessModes: ['ReadWriteMany'],
      resources: { requests: { storage: '1Gi' } },
      storageClassName: 'syno-nfs-csi',
      volumeName: `nfs-${seq}`,
    },
  });
  await kube.waitFor(
    pvcPath(`nfs-${seq}`),
    (o: PersistentVolumeClaim) => o.status?.phase === 'Bound',
    'nfs claim bound',
    60_000,
  );
  const nfs = await cli(`${NS}/nfs-${seq}`, '--to-zone', 'hyper2', '--yes');
  t.equal(nfs.code, 4);
  t.match(
    nfs.err,
    /is an NFS volume \(nfs\.csi\.k8s\.io\): its data is on the NAS and every node can mount it; there is nothing to move/,
  );

  const taken = await claim('hyper1', 'x');
  const api2 = moverApi();
  await api2.allocDisk('hyper2', 'local-lvm', { vmid: 9999, filename: taken.disk, sizeBytes: 4 * 2 ** 20 });
  const dup = await cli(`${NS}/${taken.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(dup.code, 4);
  t.match(dup.err, /already exists on hyper2/);
  await api2.freeDisk('hyper2', 'local-lvm', `local-lvm:${taken.disk}`);
  await api2.close();

  const pv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  t.equal(pv.spec.persistentVolumeReclaimPolicy, 'Delete', 'no refusal touched the PV');
  t.notOk(pv.metadata.annotations?.['pve-nfs-csi.io/move']);
  t.notOk(await helperVm());
});

t.test('a failed migration rolls back; one that leaves the source copy frees it after the bind', async (t) => {
  const c = await claim();
  await admin.patchFaults({ migrateFail: 'copy' });
  const failed = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  await admin.patchFaults({ migrateFail: 'off' });
  t.equal(failed.code, 3);
  t.match(failed.out, /rolled back, nothing changed: the Proxmox migration failed: .*migration aborted/);
  const pv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  t.equal(pv.spec.persistentVolumeReclaimPolicy, 'Delete');
  t.notOk(pv.metadata.annotations?.['pve-nfs-csi.io/move']);
  t.equal((await kube.get<PersistentVolumeClaim>(pvcPath(c.name))).spec.volumeName, c.pv);
  t.equal((await volumes('hyper1')).filter((v) => v.volid.includes(c.pv)).length, 1);
  t.same(
    (await volumes('hyper2')).filter((v) => v.volid.includes(c.pv)),
    [],
  );
  t.notOk(await helperVm());

  await admin.patchFaults({ migrateFail: 'cleanup' });
  const problems = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  await admin.patchFaults({ migrateFail: 'off' });
  t.equal(problems.code, 0, problems.out + problems.err);
  t.match(problems.err, /left the source copy .* freed after the bind/);
  await assertMoved(t, c);
});

/** Freezes the run at the checkpoint `at` for good (like kill -9); resolves the checkpoint's name. */
function freezer(at?: string) {
  let hit: (name: string) => void = () => undefined;
  const frozen = new Promise<string>((r) => (hit = r));
  const names: string[] = [];
  return {
    names,
    frozen,
    checkpoint: async (name: string) => {
      names.push(name);
      if (name === at) {
        hit(name);
        await new Promise(() => undefined);
      }
    },
  };
}

function deps(extra: Partial<MoveDeps> = {}): MoveDeps & { close(): Promise<void> } {
  const api = moverApi();
  return {
    kube: moveKube(k),
    api,
    region: 'homelab',
    vmid: 9999,
    log: () => undefined,
    bindTimeoutMs: 60_000,
    ...extra,
    close: () => api.close(),
  };
}

t.test('a crash at every checkpoint, then a fresh run: finished, nothing lost or doubled', async (t) => {
  // learn the checkpoints of an uninterrupted move
  const probe = freezer();
  const c0 = await claim();
  const d0 = deps({ checkpoint: probe.checkpoint });
  await (await startOrResume(d0, { namespace: NS, name: c0.name, toZone: 'hyper2' })).run();
  await d0.close();
  await assertMoved(t, c0);
  t.ok(probe.names.length >= 20, `${probe.names.length} checkpoints: ${probe.names.join(' ')}`);
  for (let i = 0; i < probe.names.length; i++) {
    const c = await claim();
    const f = freezer(probe.names[i]);
    const d1 = deps({ checkpoint: f.checkpoint });
    const first = startOrResume(d1, { namespace: NS, name: c.name, toZone: 'hyper2' }).then((r) => r.run());
    const where = await Promise.race([f.frozen, first.then(() => 'finished')]);
    t.equal(where, probe.names[i], `crashed at ${probe.names[i]}`);
    // the frozen run never continues; a new process starts over from the record
    const d2 = deps();
    await (await startOrResume(d2, { namespace: NS, name: c.name, toZone: 'hyper2' })).run();
    await d2.close();
    await t.test(`after a crash at ${where}`, (tt) => assertMoved(tt, c));
  }
});

t.test(
  'the VM list still shows the helper on the source after the migration: read again, not rolled back',
  async (t) => {
    const c = await claim();
    await admin.patchFaults({ resourcesLagMs: 2000 });
    const r = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
    await admin.patchFaults({ resourcesLagMs: 0 });
    t.equal(r.code, 0, r.out + r.err);
    await assertMoved(t, c);
  },
);

t.test('two moves of one claim started at once: one begins, the other is refused', async (t) => {
  const c = await claim();
  const [d1, d2] = [deps(), deps()];
  const results = await Promise.allSettled([
    startOrResume(d1, { namespace: NS, name: c.name, toZone: 'hyper2' }),
    startOrResume(d2, { namespace: NS, name: c.name, toZone: 'hyper2' }),
  ]);
  const won = results.filter((r) => r.status === 'fulfilled');
  const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  t.equal(won.length, 1, 'one run began');
  t.match(
    String(lost[0]?.reason),
    /changed since it was read \(another move of this claim starting\?\)|already records a move of this claim/,
  );
  if (won[0]?.status === 'fulfilled') await won[0].value.run();
  await d1.close();
  await d2.close();
  await assertMoved(t, c);
});

t.test('--abort before the copy rolls back; after the copy it is refused and the move finishes', async (t) => {
  const c = await claim();
  const f = freezer('save:holding');
  const d1 = deps({ checkpoint: f.checkpoint });
  void startOrResume(d1, { namespace: NS, name: c.name, toZone: 'hyper2' }).then((r) => r.run());
  t.equal(await f.frozen, 'save:holding');
  const aborted = await cli(`${NS}/${c.name}`, '--abort', '--yes');
  t.equal(aborted.code, 0, aborted.out + aborted.err);
  t.notOk(await helperVm(), 'helper released on the source');
  t.equal((await volumes('hyper1')).filter((v) => v.volid.includes(c.pv)).length, 1, 'the disk stays on the source');
  const pv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  t.equal(pv.spec.persistentVolumeReclaimPolicy, 'Delete');
  t.notOk(pv.metadata.annotations?.['pve-nfs-csi.io/move']);

  const g = freezer('release:before');
  const d2 = deps({ checkpoint: g.checkpoint });
  void startOrResume(d2, { namespace: NS, name: c.name, toZone: 'hyper2' }).then((r) => r.run());
  t.equal(await g.frozen, 'release:before');
  const late = await cli(`${NS}/${c.name}`, '--abort', '--yes');
  t.equal(late.code, 3);
  t.match(late.err, /cannot roll back: the disk is already on hyper2; run move again to finish/);
  const wrongZone = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper3', '--yes');
  t.equal(wrongZone.code, 4);
  t.match(wrongZone.err, /a move of apps\/.* to hyper2 is recorded/);
  const status = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2');
  t.equal(status.code, 1);
  t.match(status.out, /a move is recorded at step/);
  const finish = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(finish.code, 0, finish.out + finish.err);
  await assertMoved(t, c);
});

t.test('SIGKILL of the CLI process during the migration, then the same command again', async (t) => {
  const c = await claim();
  // a slow migration task: the kill lands while Proxmox is still copying
  await admin.patchFaults({ taskDurationMs: 3000 });
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      path.join(ROOT, 'src/main.ts'),
      'move',
      `${NS}/${c.name}`,
      '--to-zone',
      'hyper2',
      '--yes',
      '--kubeconfig',
      cluster.adminConfig,
      '--config',
      configFile,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT },
  );
  let err = '';
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const end = Date.now() + 60_000;
  while (!/migrate helper VM 9999/.test(err) && Date.now() < end && child.exitCode === null)
    await new Promise((r) => setTimeout(r, 50));
  t.match(err, /migrate helper VM 9999/, 'killed while migrating');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  const pv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${c.pv}`);
  t.match(
    pv.metadata.annotations?.['pve-nfs-csi.io/move'],
    /"step":"(holding|migrating)"/,
    'the record says where it stopped',
  );
  await admin.patchFaults({ taskDurationMs: 20 });
  const again = await cli(`${NS}/${c.name}`, '--to-zone', 'hyper2', '--yes');
  t.equal(again.code, 0, again.out + again.err);
  await assertMoved(t, c);
});
