// Drop-in contract of nfs.csi.k8s.io, end to end through the real program: the controller is
// composed from its command line (loadConfig → buildDrivers → gRPC server) and manages
// directories on a real nfs-ganesha; the node half runs behind its own gRPC server with a fake
// executor (this host has no NFS client), so its exact mount command is what is checked. Covered:
// the seed's StorageClass, handles of PVs upstream created, static PVs and the seed's stuck
// archive.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { NFS_DRIVER } from '../../../src/drivers.js';
import { createNfsNode } from '../../../src/nfs/node/node.js';
import { createLinuxMounter } from '../../../src/os/mounter.js';
import { startDriverServer } from '../../../src/server/driver-server.js';
import { csiClient, type VolumeCapability } from '../../helpers/csi-client.js';
import { present } from '../../helpers/present.js';
import { FakeSystem } from '../../unit/os/fakes.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';
import { composeProgram } from '../../helpers/composed-program.js';

const log = pino({ level: 'silent' });
const { g } = await startTalosExport(t);
const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'dropin-nfs-')));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The controller as main.ts composes it: no mount, the NFS protocol from user space.
const ctl = await composeProgram(t, [
  '--mode',
  'controller',
  '--nfs-endpoint',
  'tcp://127.0.0.1:0',
  '--nfs-port',
  String(g.nfsPort),
  '--nfs-mount-port',
  String(g.mountPort),
  '--nfs-call-timeout',
  '5s',
]);

// The node plugin's NFS backend behind its own server, mounts played by a fake executor.
const sys = new FakeSystem();
const nodeServer = await startDriverServer({
  driver: {
    name: NFS_DRIVER,
    accessibilityConstraints: false,
    onlineExpansion: true,
    probe: async () => true,
    node: createNfsNode({
      nodeId: 'talos-worker-1',
      log,
      mountTimeoutMs: 5000,
      kubeletDir: tmp,
      exec: sys,
      mounter: createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo }),
    }),
  },
  mode: 'node',
  endpoint: 'tcp://127.0.0.1:0',
  log,
  version: 'dropin',
});
t.teardown(() => nodeServer.stop(1000));
const node = csiClient(nodeServer.endpoint);
t.teardown(() => node.close());

const SHARE = '/volume1/k8s-volumes/talos'; // the seed's export, as ganesha serves it
const onDisk = (p: string) => path.join(g.exportDir, 'talos', p);
const put = (p: string, content: string) => {
  fs.mkdirSync(path.dirname(onDisk(p)), { recursive: true });
  fs.writeFileSync(onDisk(p), content);
};
const read = (p: string) => fs.readFileSync(onDisk(p), 'utf8');
const exists = (p: string) => fs.existsSync(onDisk(p));
const CAP: VolumeCapability = { mount: { fsType: '', mountFlags: [] }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

/** The StorageClass syno-nfs-csi, with the keys the provisioner adds (--extra-create-metadata). */
const createReq = (pv: string, namespace: string, pvc: string) => ({
  name: pv,
  capacityRange: { requiredBytes: String(5 * 1024 ** 3) },
  volumeCapabilities: [CAP],
  parameters: {
    server: g.server,
    share: SHARE,
    subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
    onDelete: 'archive',
    'csi.storage.k8s.io/pvc/namespace': namespace,
    'csi.storage.k8s.io/pvc/name': pvc,
    'csi.storage.k8s.io/pv/name': pv,
  },
});

/** The mount command(s) the node ran since `from`. */
const mountsSince = (from: number) =>
  sys.calls
    .slice(from)
    .filter((c) => c.cmd === 'mount')
    .map((c) => [c.cmd, ...c.args]);

t.test('5. StorageClass syno-nfs-csi: <namespace>/<pvc>, upstream handle, archive on delete', async (t) => {
  t.same((await ctl.identity.Probe()).ready, { value: true });
  const pv = 'pvc-2c4e6a8b-0d1f-4a3b-9c5d-7e9f1a3b5c7d';
  const res = await ctl.controller.CreateVolume(createReq(pv, 'monitoring', 'prometheus-db-prometheus-0'));
  // upstream: Trim(server,"/") # Trim(share,"/") # Trim(subDir,"/") # pv name (subDir was set) # onDelete
  t.equal(
    present(res.volume, 'volume').volumeId,
    `127.0.0.1#volume1/k8s-volumes/talos#monitoring/prometheus-db-prometheus-0#${pv}#archive`,
  );
  t.ok(
    fs.statSync(onDisk('monitoring/prometheus-db-prometheus-0')).isDirectory(),
    'directory <ns>/<pvc> created under the share',
  );

  // The node mounts what CreateVolume's volume_context names.
  const target = path.join(tmp, 'pods', 'prom', 'mount');
  const from = sys.calls.length;
  await node.node.NodePublishVolume({
    volumeId: present(res.volume, 'volume').volumeId,
    targetPath: target,
    volumeCapability: CAP,
    volumeContext: present(res.volume, 'volume').volumeContext,
  });
  t.same(mountsSince(from), [
    ['mount', '-t', 'nfs', '127.0.0.1:/volume1/k8s-volumes/talos/monitoring/prometheus-db-prometheus-0', target],
  ]);
  await node.node.NodeUnpublishVolume({ volumeId: present(res.volume, 'volume').volumeId, targetPath: target });
  t.notOk(fs.existsSync(target), 'target removed');

  put('monitoring/prometheus-db-prometheus-0/wal/00000001', 'samples');
  await ctl.controller.DeleteVolume({ volumeId: present(res.volume, 'volume').volumeId });
  t.equal(
    read('archived-monitoring/prometheus-db-prometheus-0/wal/00000001'),
    'samples',
    'archived to archived-<ns>/<pvc>',
  );
  t.notOk(exists('monitoring/prometheus-db-prometheus-0'), 'live directory gone');
});

t.test('6. handles of PVs upstream created, on directories that already exist', async (t) => {
  put('keep/important.txt', 'not a volume');
  put('media/sonarr-config/config.xml', 'sonarr');
  put('media/lidarr-config/config.xml', 'lidarr');
  put('apps/grafana/grafana.db', 'grafana');
  put('apps/loki/chunks/1', 'loki');
  put('tools/mealie/mealie.db', 'mealie');
  put('pvc-3f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/data', 'legacy');
  put('pvc-4a2b3c4d-5e6f-4a70-8b81-9c0d1e2f3a4c/data', 'no subDir parameter');
  const del = (volumeId: string) => ctl.controller.DeleteVolume({ volumeId });

  await del('127.0.0.1#volume1/k8s-volumes/talos#media/sonarr-config#pvc-7d0e1f2a-3b4c-4d5e-8f60-718293a4b5c6#archive');
  t.equal(read('archived-media/sonarr-config/config.xml'), 'sonarr', '5 fields, archive: renamed to archived-<subDir>');
  t.notOk(exists('media/sonarr-config'));
  t.equal(read('media/lidarr-config/config.xml'), 'lidarr', 'the other claim of the namespace untouched');

  const retained = '127.0.0.1#volume1/k8s-volumes/talos#apps/grafana#pvc-8e1f2a3b-4c5d-4e6f-9a70-8192a3b4c5d6#retain';
  const valid = await ctl.controller.ValidateVolumeCapabilities({ volumeId: retained, volumeCapabilities: [CAP] });
  t.ok(valid.confirmed, 'ValidateVolumeCapabilities finds the volume of an upstream handle');
  await del(retained);
  t.equal(read('apps/grafana/grafana.db'), 'grafana', '5 fields, retain: kept');

  // Handles from before onDelete existed have 4 fields; the policy is the default, delete.
  await del('127.0.0.1#volume1/k8s-volumes/talos#apps/loki#pvc-9f2a3b4c-5d6e-4f70-8a81-92a3b4c5d6e7');
  t.notOk(exists('apps/loki'), '4 fields: deleted');
  t.equal(
    read('apps/grafana/grafana.db'),
    'grafana',
    'the parent apps/ and its other claim survive (upstream #855 removed apps/)',
  );

  // What upstream writes for onDelete delete: an empty 5th field.
  await del('127.0.0.1#volume1/k8s-volumes/talos#tools/mealie#pvc-0a3b4c5d-6e7f-4081-9b92-a3b4c5d6e7f8#');
  t.notOk(exists('tools/mealie'), 'empty 5th field: deleted');

  // A StorageClass without subDir: the PV name is the directory, the uuid field stays empty.
  await del('127.0.0.1#volume1/k8s-volumes/talos#pvc-4a2b3c4d-5e6f-4a70-8b81-9c0d1e2f3a4c##');
  t.notOk(exists('pvc-4a2b3c4d-5e6f-4a70-8b81-9c0d1e2f3a4c'), 'no subDir parameter (server#share#pv##): deleted');

  await del('127.0.0.1/volume1/k8s-volumes/talos/pvc-3f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b');
  t.notOk(exists('pvc-3f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b'), 'legacy server/share/subDir handle: deleted');

  t.equal(read('keep/important.txt'), 'not a volume', 'nothing else on the share touched');
});

t.test('6. node: static PV volumeAttributes and an upstream PV volume_context', async (t) => {
  // A static PV like logeverylift-db-backup: spec.mountOptions arrive as mount flags,
  // volumeAttributes as volume_context; the handle is only an ID.
  const staticId = '127.0.0.1/volume1/k8s-backups/postgres/logeverylift##';
  const target = path.join(tmp, 'pods', 'backup', 'mount');
  let from = sys.calls.length;
  await node.node.NodePublishVolume({
    volumeId: staticId,
    targetPath: target,
    volumeCapability: {
      mount: { fsType: '', mountFlags: ['nfsvers=4.1'] },
      accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
    },
    volumeContext: {
      server: '127.0.0.1',
      share: '/volume1/k8s-backups',
      subDir: 'postgres/logeverylift',
      mountOptions: 'hard,noatime',
    },
  });
  t.same(mountsSince(from), [
    [
      'mount',
      '-t',
      'nfs',
      '-o',
      'nfsvers=4.1,hard,noatime',
      '127.0.0.1:/volume1/k8s-backups/postgres/logeverylift',
      target,
    ],
  ]);
  await node.node.NodeUnpublishVolume({ volumeId: staticId, targetPath: target });
  t.notOk(fs.existsSync(target));

  // A dynamic PV upstream created: its volume_context is the StorageClass parameters with subDir
  // resolved, plus the provisioner's keys.
  const pv = 'pvc-7d0e1f2a-3b4c-4d5e-8f60-718293a4b5c6';
  const target2 = path.join(tmp, 'pods', 'sonarr', 'mount');
  from = sys.calls.length;
  await node.node.NodePublishVolume({
    volumeId: `127.0.0.1#volume1/k8s-volumes/talos#media/sonarr-config#${pv}#archive`,
    targetPath: target2,
    volumeCapability: CAP,
    volumeContext: {
      server: '127.0.0.1',
      share: SHARE,
      subDir: 'media/sonarr-config',
      onDelete: 'archive',
      'csi.storage.k8s.io/pv/name': pv,
      'csi.storage.k8s.io/pvc/name': 'sonarr-config',
      'csi.storage.k8s.io/pvc/namespace': 'media',
      'storage.kubernetes.io/csiProvisionerIdentity': '1712345678901-8081-nfs.csi.k8s.io',
    },
  });
  t.same(mountsSince(from), [
    ['mount', '-t', 'nfs', '127.0.0.1:/volume1/k8s-volumes/talos/media/sonarr-config', target2],
  ]);
  await node.node.NodeUnpublishVolume({ volumeId: pv, targetPath: target2 });
});

t.test('7. an archived copy of the same claim exists: delete still succeeds, archives beside it', async (t) => {
  const claim = ['reelsmith', 'data'] as const;
  const ids: string[] = [];
  for (const [i, content] of ['one', 'two', 'three'].entries()) {
    const res = await ctl.controller.CreateVolume(createReq(`pvc-00000000-0000-4000-8000-00000000000${i}`, ...claim));
    t.same(fs.readdirSync(onDisk('reelsmith/data')), [], `claim #${i + 1} starts empty`);
    put(`reelsmith/data/${content}.txt`, content);
    await ctl.controller.DeleteVolume({ volumeId: present(res.volume, 'volume').volumeId });
    t.notOk(exists('reelsmith/data'), `claim #${i + 1} archived`);
    ids.push(present(res.volume, 'volume').volumeId);
  }
  const archives = fs.readdirSync(onDisk('archived-reelsmith')).sort();
  t.equal(archives.length, 3, `three archives: ${archives.join(', ')}`);
  t.equal(read('archived-reelsmith/data/one.txt'), 'one', 'the first archive keeps its name and data');
  const others = archives.filter((a) => a !== 'data');
  t.ok(
    others.every((a) => a.startsWith('data-')),
    'later ones sit beside it under suffixed names',
  );
  t.same(
    others
      .map((a) => fs.readdirSync(onDisk(`archived-reelsmith/${a}`)))
      .flat()
      .sort(),
    ['three.txt', 'two.txt'],
  );

  await ctl.controller.DeleteVolume({ volumeId: present(ids[1], 'volume id of the second claim') });
  t.same(
    fs.readdirSync(onDisk('archived-reelsmith')).sort(),
    archives,
    'a repeated delete succeeds and archives nothing more',
  );
});
