// Drop-in contract of csi.proxmox.sinextra.dev, end to end through the real program: flags and
// the upstream config Secret → loadConfig → buildDrivers → one gRPC server per driver, against
// the Proxmox simulator over HTTPS. What an upstream cluster already has must keep working: its
// StorageClass, its volume handles, disks the old driver attached (found by the new node plugin
// without reformatting) and its WWN scheme.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { proxmoxApi } from 'proxmox-api';
import { Agent, fetch } from 'undici';
import { wwnForSlot as controllerWwn, wwnHexForSlot as nodeWwn } from '../../../src/proxmox/contract.js';
import { diskFromPublishContext } from '../../../src/proxmox/node/wwn.js';
import { SimulatorAdmin, startSimulator } from '../../../sim/index.js';
import type { VolumeCapability } from '../../helpers/csi-client.js';
import { present } from '../../helpers/present.js';
import { composeProgram } from '../../helpers/composed-program.js';
import { nodeIdentityArgs } from '../../harness/backends.js';
import { mountsUnder, unmountUnder } from '../../helpers/mounts.js';

const GiB = 1024 ** 3;
const run = (cmd: string, args: string[]) =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

function loopSkipReason(): string | false {
  if (process.getuid?.() !== 0) return 'needs root: the loop backend makes loop devices, mkfs and mounts';
  try {
    run('losetup', ['--version']);
    run('mkfs.ext4', ['-V']);
  } catch (e) {
    return `missing tool: ${(e as Error).message.split('\n')[0]}`;
  }
  return false;
}
const noLoop = loopSkipReason();

const sim = await startSimulator({
  backend: noLoop ? 'none' : 'loop',
  faults: { authFailureDelayMs: 0, taskDurationMs: 5 },
});
t.teardown(() => sim.close());
const admin = new SimulatorAdmin(sim.adminUrl);
const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'dropin-proxmox-')));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The old driver's view of Proxmox: the same token through an unrelated client (proxmox-api).
const agent = new Agent({ connect: { ca: fs.readFileSync(sim.caFile) } });
t.teardown(() => agent.close());
const pve = proxmoxApi({
  host: sim.host,
  port: sim.port,
  tokenID: sim.tokenId,
  tokenSecret: sim.tokenSecret,
  queryTimeout: 5000,
  fetch: (url, init) => fetch(url, { ...init, dispatcher: agent }),
});
async function waitTask(node: string, upid: string): Promise<string | undefined> {
  for (;;) {
    const st = (await pve.nodes.$(node).tasks.$(upid).status.$get()) as { status: string; exitstatus?: string };
    if (st.status === 'stopped') return st.exitstatus;
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface SimVm {
  vmid: number;
  name: string;
  config: Record<string, string>;
  pending: Record<string, string>;
  pendingDelete: string[];
}
interface SimState {
  nodes: { name: string; storages: { id: string; volumes: { volid: string; size: number; owner: number }[] }[] }[];
  vms: SimVm[];
}
const state = async () => (await admin.state()) as SimState;
/** Volumes the CSI driver owns (VMID 9999) on a host's local-lvm; boot disks left out. */
const volumesOn = async (node: string) =>
  present(
    present(
      (await state()).nodes.find((n) => n.name === node),
      `simulator node ${node}`,
    ).storages.find((s) => s.id === 'local-lvm'),
    `local-lvm on ${node}`,
  ).volumes.filter((v) => v.owner === 9999);
const vmState = async (vmid: number) =>
  present(
    (await state()).vms.find((v) => v.vmid === vmid),
    `simulator VM ${vmid}`,
  );
const configWrites = async () => {
  const c = await admin.counters();
  return [
    'POST /nodes/{node}/qemu/{vmid}/config',
    'PUT /nodes/{node}/qemu/{vmid}/config',
    'PUT /nodes/{node}/qemu/{vmid}/unlink',
  ].reduce((n, k) => n + (c.byRoute[k] ?? 0), 0);
};

const url = sim.url; // https://127.0.0.1:PORT/api2/json, as the upstream Secret writes it
function writeSecret(name: string, text: string): string {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, text);
  return file;
}
// The Secret's config.yaml exactly as upstream documents it, plus our ca_file.
const configA = writeSecret(
  'config-a.yaml',
  `clusters:
  - url: ${url}
    insecure: false
    token_id: "${sim.tokenId}"
    token_secret: "${sim.tokenSecret}"
    region: homelab
    ca_file: ${sim.caFile}
`,
);
const controllerFlags = (file: string) => [
  '--mode',
  'controller',
  '--proxmox-endpoint',
  'tcp://127.0.0.1:0',
  '--proxmox-config',
  file,
];
const W1_LINKS = path.join(sim.loopLinkDir, 'talos-worker-1');
const main = await composeProgram(t, [
  '--mode',
  'all',
  '--proxmox-endpoint',
  'tcp://127.0.0.1:0',
  '--proxmox-config',
  configA,
  ...nodeIdentityArgs(),
  '--device-dir',
  W1_LINKS,
  '--kubelet-dir',
  tmp,
]);

const MOUNT_EXT4: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [] },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
};
const topo = (zone: string) => ({
  segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': zone },
});
const grpcCode = (p: Promise<unknown>) =>
  p.then(
    () => 'OK',
    (e: unknown) => status[(e as { code?: number }).code ?? status.UNKNOWN],
  );

t.test('config Secret: token inline with ca_file, and token_id_file/token_secret_file', async (t) => {
  t.same(await main.identity.GetPluginInfo(), {
    name: 'csi.proxmox.sinextra.dev',
    vendorVersion: 'dropin',
    manifest: {},
  });
  t.same((await main.identity.Probe()).ready, { value: true }, 'Probe: the process serves');
  // Probe never judges the backend (docs/design.md#probe-readiness); an API call does.
  const capacity = (c: typeof main) =>
    grpcCode(c.controller.GetCapacity({ parameters: { storage: 'local-lvm' }, accessibleTopology: topo('hyper1') }));
  t.equal(await capacity(main), 'OK', 'inline token, CA pinned by ca_file');

  const noCa = await composeProgram(
    t,
    controllerFlags(
      writeSecret('config-no-ca.yaml', fs.readFileSync(configA, 'utf8').replace(/^\s+ca_file:.*\n/m, '')),
    ),
  );
  t.equal(await capacity(noCa), 'UNAVAILABLE', 'control: without ca_file the self-signed API is not trusted');
  t.same((await noCa.identity.Probe()).ready, { value: true }, 'while Probe stays ready (no restart loop)');

  const idFile = writeSecret('token_id', `${sim.tokenId}\n`);
  const secretFile = writeSecret('token_secret', `${sim.tokenSecret}\n`);
  const filesYaml = (secret: string) => `clusters:
  - url: ${url}
    insecure: true
    token_id_file: ${idFile}
    token_secret_file: ${secret}
    region: homelab
`;
  const files = await composeProgram(t, controllerFlags(writeSecret('config-files.yaml', filesYaml(secretFile))));
  t.same(
    (await files.identity.Probe()).ready,
    { value: true },
    'token read from files (trailing newline trimmed), insecure: true',
  );
  const cap = await files.controller.GetCapacity({
    parameters: { storage: 'local-lvm' },
    accessibleTopology: topo('hyper1'),
  });
  t.ok(Number(cap.availableCapacity) > 100 * GiB, `an authenticated call works: ${cap.availableCapacity} bytes free`);

  const wrong = writeSecret('token_secret_wrong', '11111111-2222-3333-4444-555555555555\n');
  const bad = await composeProgram(t, controllerFlags(writeSecret('config-wrong.yaml', filesYaml(wrong))));
  t.equal(await capacity(bad), 'FAILED_PRECONDITION', 'control: the secret really comes from token_secret_file');
});

t.test('1. StorageClass proxmox-local unchanged: vm-9999-<pv> on the requested host', async (t) => {
  const pv = 'pvc-0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d';
  const created = await main.controller.CreateVolume({
    name: pv,
    capacityRange: { requiredBytes: String(GiB) },
    volumeCapabilities: [MOUNT_EXT4],
    parameters: {
      storage: 'local-lvm',
      cache: 'writethrough',
      ssd: 'true',
      backup: 'true',
      'csi.storage.k8s.io/fstype': 'ext4',
      'csi.storage.k8s.io/pvc/name': 'config-sonarr-0',
      'csi.storage.k8s.io/pvc/namespace': 'media',
      'csi.storage.k8s.io/pv/name': pv,
    },
    accessibilityRequirements: { requisite: [topo('hyper2')], preferred: [topo('hyper2')] },
  });
  const vol = present(created.volume, 'CreateVolume: volume');
  const id = vol.volumeId;
  t.equal(id, `homelab/hyper2/local-lvm/vm-9999-${pv}`);
  t.equal(vol.capacityBytes, String(GiB));
  t.same(vol.accessibleTopology, [topo('hyper2')]);
  t.match(vol.volumeContext, { storage: 'local-lvm', cache: 'writethrough', ssd: 'true', backup: 'true' });
  t.match(
    await volumesOn('hyper2'),
    [{ volid: `local-lvm:vm-9999-${pv}`, owner: 9999, size: GiB }],
    'the disk exists on hyper2, owned by VMID 9999',
  );

  const pub = await main.controller.ControllerPublishVolume({
    volumeId: id,
    nodeId: 'talos-worker-2',
    volumeCapability: MOUNT_EXT4,
    volumeContext: vol.volumeContext,
  });
  t.same(pub.publishContext, { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '1' });
  t.equal(
    (await vmState(112)).config.scsi1,
    `local-lvm:vm-9999-${pv},backup=1,cache=writethrough,discard=on,iothread=1,size=1G,ssd=1,wwn=0x5056432d49443031`,
    'the StorageClass options reach the drive: backup, cache, ssd (+discard), iothread, PVC-ID WWN',
  );
  await main.controller.ControllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-2' });
  await main.controller.DeleteVolume({ volumeId: id });
  t.same(await volumesOn('hyper2'), [], 'freed');
});

t.test('2+4. a volume the old driver created and attached', async (t) => {
  const pv = 'pvc-5b8f3c2a-9d41-4e6b-a0c7-1f2e3d4c5b6a';
  const disk = `vm-9999-${pv}`;
  const volumeId = `homelab/hyper1/local-lvm/${disk}`;
  // What the PV carries: the StorageClass parameters (upstream returns them as volume_context),
  // the provisioner's metadata and its identity.
  const oldContext = {
    storage: 'local-lvm',
    cache: 'writethrough',
    ssd: 'true',
    backup: 'true',
    'csi.storage.k8s.io/pv/name': pv,
    'csi.storage.k8s.io/pvc/name': 'config-radarr-0',
    'csi.storage.k8s.io/pvc/namespace': 'media',
    'storage.kubernetes.io/csiProvisionerIdentity': '1712345678901-8081-csi.proxmox.sinextra.dev',
  };
  const hyper1 = pve.nodes.$('hyper1');
  t.equal(
    await hyper1.storage.$('local-lvm').content.$post({ vmid: 9999, filename: disk, size: '1G' }),
    `local-lvm:${disk}`,
  );
  // The old driver's attach: POST …/config (a qmconfig task) with the third slot, as if scsi1/2 had been used before.
  const upid = await hyper1.qemu.$(111).config.$post({
    scsi3: `local-lvm:${disk},backup=1,cache=writethrough,discard=on,iothread=1,ssd=1,wwn=0x5056432d49443033`,
  });
  t.equal(await waitTask('hyper1', upid), 'OK');
  const before = await hyper1.qemu.$(111).config.$get();
  t.match(before.scsi3, /^local-lvm:vm-9999-pvc-5b8f3c2a-9d41-4e6b-a0c7-1f2e3d4c5b6a,.*wwn=0x5056432d49443033/);

  await admin.resetCounters();
  const pub = await main.controller.ControllerPublishVolume({
    volumeId,
    nodeId: 'talos-worker-1',
    volumeCapability: MOUNT_EXT4,
    volumeContext: oldContext,
  });
  t.same(
    pub.publishContext,
    { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443033', lun: '3' },
    'found where the old driver put it',
  );
  const after = await hyper1.qemu.$(111).config.$get();
  t.equal(after.digest, before.digest, 'VM config unchanged (same digest)');
  t.equal(after.scsi3, before.scsi3);
  t.equal(await configWrites(), 0, 'no config write or unlink was sent');

  const valid = await main.controller.ValidateVolumeCapabilities({
    volumeId,
    volumeCapabilities: [MOUNT_EXT4],
    volumeContext: oldContext,
  });
  t.ok(valid.confirmed, `ValidateVolumeCapabilities confirms the upstream handle ${valid.message}`);
  const got = await main.controller.ControllerGetVolume({ volumeId });
  t.equal(present(got.volume, 'volume').volumeId, volumeId);
  t.equal(present(got.volume, 'volume').capacityBytes, String(GiB));
  t.same(present(got.status, 'status').publishedNodeIds, ['talos-worker-1']);
  t.equal(present(got.status, 'status').volumeCondition?.abnormal, false);

  await t.test('4. the new node plugin stages the old attachment without reformatting', { skip: noLoop }, async (t) => {
    const link = path.join(W1_LINKS, 'wwn-0x5056432d49443033');
    const device = fs.realpathSync(link);
    t.match(device, /^\/dev\/loop\d+$/, `the simulator plugged the old attachment: ${link} -> ${device}`);
    const root = fs.mkdtempSync(path.join(tmp, 'node-'));
    t.teardown(() => unmountUnder(root));
    // What the old node plugin left on the disk: ext4 with the app's data.
    run('mkfs.ext4', ['-q', '-F', device]);
    const uuid = run('blkid', ['-p', '-s', 'UUID', '-o', 'value', device]);
    fs.mkdirSync(path.join(root, 'old'));
    run('mount', [device, path.join(root, 'old')]);
    fs.writeFileSync(path.join(root, 'old', 'radarr.db'), 'existing data');
    run('umount', [path.join(root, 'old')]);

    const staging = path.join(root, 'staging');
    const target = path.join(root, 'pods', 'p1', 'volumes', 'mount');
    // Exactly what the upstream controller published (DevicePath + lun).
    const publishContext = { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443033', lun: '3' };
    await main.node.NodeStageVolume({
      volumeId,
      publishContext,
      stagingTargetPath: staging,
      volumeCapability: MOUNT_EXT4,
      volumeContext: oldContext,
    });
    await main.node.NodePublishVolume({
      volumeId,
      publishContext,
      stagingTargetPath: staging,
      targetPath: target,
      volumeCapability: MOUNT_EXT4,
      volumeContext: oldContext,
    });
    t.equal(fs.readFileSync(path.join(target, 'radarr.db'), 'utf8'), 'existing data', 'the data is there');
    t.equal(run('blkid', ['-p', '-s', 'UUID', '-o', 'value', device]), uuid, 'same filesystem (not reformatted)');
    await main.node.NodeUnpublishVolume({ volumeId, targetPath: target });
    await main.node.NodeUnstageVolume({ volumeId, stagingTargetPath: staging });
    t.same(mountsUnder(root), [], 'nothing left mounted');
    t.notOk(fs.existsSync(target), 'target removed');
  });

  // The old attacher recorded upstream's node id in the VolumeAttachment: `<node>/<vmid>` when the
  // VM's SMBIOS serial carries i=<vmid>. The new controller detaches with that id.
  await main.controller.ControllerUnpublishVolume({ volumeId, nodeId: 'talos-worker-1/111' });
  const w1 = await vmState(111);
  t.notOk(w1.config.scsi3, 'detached');
  t.same([w1.pending, w1.pendingDelete], [{}, []], 'nothing left pending');
  t.notOk(
    Object.values(w1.config).some((v) => v.includes(disk)),
    'no unusedN entry for the disk',
  );
  if (!noLoop) t.notOk(fs.existsSync(path.join(W1_LINKS, 'wwn-0x5056432d49443033')), 'unplugged from the VM');
  await main.controller.DeleteVolume({ volumeId });
  t.notOk(
    (await volumesOn('hyper1')).some((v) => v.volid === `local-lvm:${disk}`),
    'freed',
  );
  t.equal(await grpcCode(main.controller.DeleteVolume({ volumeId })), 'OK', 'deleting again succeeds');
});

t.test('3. WWN scheme: slot N <-> hex of ASCII "PVC-ID%02d"', async (t) => {
  const expected: Record<number, string> = {
    1: '0x5056432d49443031',
    9: '0x5056432d49443039',
    10: '0x5056432d49443130',
    30: '0x5056432d49443330',
  };
  for (const [slot, wwn] of Object.entries(expected)) {
    t.equal(controllerWwn(Number(slot)), wwn, `controller: slot ${slot}`);
    t.equal(`0x${nodeWwn(Number(slot))}`, wwn, `node: slot ${slot}`);
    t.equal(`0x${diskFromPublishContext({ lun: slot }, 'v').wwn}`, wwn, `node: publish context with only lun ${slot}`);
  }

  // Through the controller: a stopped VM (no loop devices) filled so that the next free slots
  // are 1, then 9 and 10, then 30.
  const vmid = 103;
  const vm = pve.nodes.$('hyper3').qemu.$(vmid);
  await admin.patchVm(vmid, { status: 'stopped' });
  const fill = async (slots: number[]) =>
    vm.config.$put(Object.fromEntries(slots.map((s) => [`scsi${s}`, 'local-lvm:1'])));
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) {
    const r = await main.controller.CreateVolume({
      name: `pvc-wwn-${i}`,
      capacityRange: { requiredBytes: String(GiB / 2) },
      volumeCapabilities: [MOUNT_EXT4],
      parameters: { storage: 'local-lvm' },
      accessibilityRequirements: { requisite: [topo('hyper3')], preferred: [] },
    });
    ids.push(present(r.volume, 'volume').volumeId);
  }
  const publish = async (id: string) =>
    (
      await main.controller.ControllerPublishVolume({
        volumeId: id,
        nodeId: 'talos-cp-3',
        volumeCapability: MOUNT_EXT4,
        volumeContext: {},
      })
    ).publishContext;
  const check = async (ctx: Record<string, string>, slot: number) => {
    const wwn = present(expected[slot], `the WWN of slot ${slot}`);
    t.same(ctx, { DevicePath: `/dev/disk/by-id/wwn-${wwn}`, lun: String(slot) }, `slot ${slot} publish context`);
    t.match((await vmState(vmid)).config[`scsi${slot}`], new RegExp(`,wwn=${wwn}$`), `scsi${slot} carries ${wwn}`);
  };
  const [first, second, third, fourth] = ids;
  if (!first || !second || !third || !fourth) throw new Error(`four volumes expected, ${ids.length} created`);
  await check(await publish(first), 1);
  await fill([2, 3, 4, 5, 6, 7, 8]);
  await check(await publish(second), 9);
  await check(await publish(third), 10);
  await fill(Array.from({ length: 19 }, (_, i) => 11 + i));
  await check(await publish(fourth), 30);
  for (const id of ids) {
    await main.controller.ControllerUnpublishVolume({ volumeId: id, nodeId: 'talos-cp-3' });
    await main.controller.DeleteVolume({ volumeId: id });
  }
});
