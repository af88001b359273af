// Scenario 5, bad input: a table of hostile requests for every RPC of both drivers, sent to the
// real program (controller and node of both drivers in one process) that runs in a mount
// namespace of its own, so a node call that acts on "/" or outside the kubelet directory harms
// only that namespace, and is seen. Inside it, before the program starts: a tmpfs outside the
// kubelet directory, an unrelated tmpfs at a pod path inside it, a file holding data at another
// pod path, and a symlink from a pod path to the outside. Each row lists the answers it allows;
// afterwards the program must still be alive and ready, the namespace's mount table unchanged,
// every planted file intact, the Proxmox VMs' configs unchanged and nothing new on the export.
import fs from 'node:fs';
import path from 'node:path';
import { auditProxmox, baseline, type SimState } from './audit.js';
import { GiB, SINGLE_WRITER, topology, type ChaosEnv } from './env.js';
import { Program, programKnows } from './program.js';
import { CsiCaller, Recorder, field, volumeIdOf, type Service } from './rpc.js';
import { sharedGanesha, type NfsShared } from './nfs.js';
import { nodeIdentityArgs, socketEndpointArgs } from '../backends.js';

type Driver = 'proxmox' | 'nfs';
interface Row {
  driver: Driver;
  svc: Service;
  method: string;
  label: string;
  req: object;
  allow: string[];
}

const IA = 'INVALID_ARGUMENT';
const NF = 'NOT_FOUND';
const FP = 'FAILED_PRECONDITION';
const OOR = 'OUT_OF_RANGE';
// A method a driver does not offer may check the spec's required fields first.
const UNIMPL = 'UNIMPLEMENTED';

export async function badInput(env: ChaosEnv, shared: NfsShared): Promise<Recorder> {
  const rec = new Recorder('5 bad input, every RPC (own mount ns)');
  const g = await sharedGanesha(shared);
  const { admin } = env;
  await admin.reset();
  const base = path.join(env.runDir, 'input');
  const K = path.join(base, 'kubelet');
  const OUT = path.join(base, 'outside');
  const foreign = path.join(K, 'pods/p1/volumes/kubernetes.io~csi/foreign/mount');
  const plain = path.join(K, 'pods/p2/volumes/kubernetes.io~csi/plain/mount');
  const link = path.join(K, 'pods/p3/volumes/kubernetes.io~csi/link/mount');
  const stagingForeign = path.join(K, 'plugins/kubernetes.io/csi/csi.proxmox.sinextra.dev/foreign/globalmount');
  const devices = path.join(base, 'devices');
  for (const d of [OUT, foreign, path.dirname(plain), path.dirname(link), stagingForeign, devices])
    fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(plain, "user data that is not the driver's\n");
  fs.symlinkSync(OUT, link);
  const setup = [
    `mount -t tmpfs chaos-outside '${OUT}'`,
    `echo keep > '${OUT}/data'`,
    `mount -t tmpfs chaos-foreign '${foreign}'`,
    `echo keep > '${foreign}/data'`,
    `mount -t tmpfs chaos-foreign-staging '${stagingForeign}'`,
    `echo keep > '${stagingForeign}/data'`,
  ].join('\n');
  const pveSock = path.join(base, 'pve.sock');
  const nfsSock = path.join(base, 'nfs.sock');
  const kubeletFlag = programKnows('--kubelet-dir') ? ['--kubelet-dir', K] : [];
  if (!kubeletFlag.length)
    rec.violate(
      'the program has no --kubelet-dir flag: node calls cannot be confined to a kubelet directory (defect 2)',
    );
  const prog = new Program({
    name: 'input-all',
    runDir: env.runDir,
    namespace: { setup },
    args: [
      '--mode',
      'all',
      ...socketEndpointArgs(pveSock, nfsSock),
      '--proxmox-config',
      env.proxmoxConfig,
      ...nodeIdentityArgs(),
      '--device-dir',
      devices,
      '--nfs-port',
      String(g.nfsPort),
      '--nfs-mount-port',
      String(g.mountPort),
      '--nfs-mount-timeout',
      '5s',
      '--nfs-call-timeout',
      '3s',
      ...kubeletFlag,
    ],
  });
  await prog.start();
  const pid = prog.pid;
  const mountTable = () =>
    fs
      .readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ').slice(4, 5).join(' '))
      .sort();
  const before = mountTable();
  const csi: Record<Driver, CsiCaller> = {
    proxmox: new CsiCaller(`unix://${pveSock}`, rec),
    nfs: new CsiCaller(`unix://${nfsSock}`, rec),
  };

  // Real volumes for rows that need one that exists.
  const talos = path.join(g.exportDir, 'talos');
  fs.mkdirSync(path.join(talos, 'sentinel'), { recursive: true });
  fs.writeFileSync(path.join(talos, 'sentinel', 'keep'), 'keep\n');
  const pve = await csi.proxmox.op('controller', 'CreateVolume', {
    name: 'pvc-chaos-input',
    parameters: { storage: 'local-lvm' },
    volumeCapabilities: [SINGLE_WRITER],
    capacityRange: { requiredBytes: String(GiB) },
    accessibilityRequirements: topology('hyper1'),
  });
  const nfsParams = { server: g.server, share: `${g.share}/talos` };
  const nfsVol = await csi.nfs.op('controller', 'CreateVolume', {
    name: 'pvc-chaos-input',
    parameters: nfsParams,
    volumeCapabilities: [SINGLE_WRITER],
  });
  if (pve.code !== 'OK' || nfsVol.code !== 'OK') rec.violate(`setup: CreateVolume answered ${pve.code}/${nfsVol.code}`);
  const pveId = pve.code === 'OK' ? volumeIdOf(pve) : 'homelab/hyper1/local-lvm/vm-9999-pvc-chaos-input';
  const nfsId = nfsVol.code === 'OK' ? volumeIdOf(nfsVol) : '127.0.0.1#/volume1/k8s-volumes/talos#pvc-chaos-input##';
  const baseState = baseline((await admin.state()) as SimState);
  const exportBefore = fs.readdirSync(talos).sort();

  const hostileIds: [string, string][] = [
    ['empty', ''],
    ['huge (1 MiB)', 'x'.repeat(1 << 20)],
    ['traversal', '../../etc/passwd'],
    ['NUL', 'pvc-a\u0000b'],
    ['control chars', 'pvc-\u001b[31m\r\nb'],
  ];
  const idAllow = (label: string, lenient: string[]) =>
    label === 'empty' || label === 'NUL' || label === 'control chars' ? [IA] : [IA, ...lenient];
  const hostilePaths: [string, string, string[]][] = [
    ['empty', '', [IA]],
    ['"/"', '/', [IA]],
    ['relative', 'relative/target', [IA]],
    ['/var/lib/kubelet/../../etc', '/var/lib/kubelet/../../etc', [IA]],
    ['kubelet dir/../outside', `${K}/pods/../../outside`, [IA]],
    ['outside the kubelet dir', OUT, [IA]],
    ['NUL', `${K}/pods/a\u0000b`, [IA]],
    ['control chars', `${K}/pods/a\nb`, [IA]],
    ['huge', `${K}/${'a/'.repeat(40_000)}`, [IA, NF]],
  ];
  const bootDisk = 'homelab/hyper1/local-lvm/vm-101-disk-0';
  const wrong: Record<Driver, string> = { proxmox: nfsId, nfs: pveId };
  const own: Record<Driver, string> = { proxmox: pveId, nfs: nfsId };
  const rows: Row[] = [];
  const add = (driver: Driver, svc: Service, method: string, label: string, req: object, allow: string[]) =>
    rows.push({ driver, svc, method, label, req, allow });

  for (const d of ['proxmox', 'nfs'] as Driver[]) {
    const params = d === 'proxmox' ? { storage: 'local-lvm' } : nfsParams;
    const create = {
      name: 'pvc-chaos-input-x',
      parameters: params,
      volumeCapabilities: [SINGLE_WRITER],
      capacityRange: { requiredBytes: String(GiB) },
      ...(d === 'proxmox' && { accessibilityRequirements: topology('hyper1') }),
    };
    // Identity: nothing to get wrong, but it must answer.
    add(d, 'identity', 'GetPluginInfo', 'plain', {}, ['OK']);
    add(d, 'identity', 'GetPluginCapabilities', 'plain', {}, ['OK']);
    add(d, 'identity', 'Probe', 'plain', {}, ['OK']);
    add(d, 'controller', 'ControllerGetCapabilities', 'plain', {}, ['OK']);
    // CreateVolume
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'CreateVolume',
        `name ${label}`,
        { ...create, name: v },
        label === 'empty' || label === 'NUL' || label === 'control chars' ? [IA] : [IA, 'OK'],
      );
    add(d, 'controller', 'CreateVolume', 'required_bytes -1', { ...create, capacityRange: { requiredBytes: '-1' } }, [
      IA,
      OOR,
    ]);
    add(d, 'controller', 'CreateVolume', 'limit_bytes -5', { ...create, capacityRange: { limitBytes: '-5' } }, [
      IA,
      OOR,
    ]);
    add(
      d,
      'controller',
      'CreateVolume',
      'required > limit',
      { ...create, capacityRange: { requiredBytes: String(2 * GiB), limitBytes: String(GiB) } },
      [IA, OOR],
    );
    add(
      d,
      'controller',
      'CreateVolume',
      'required 2^63-1',
      { ...create, capacityRange: { requiredBytes: '9223372036854775807' } },
      [IA, OOR, 'RESOURCE_EXHAUSTED', ...(d === 'nfs' ? ['OK'] : [])],
    );
    add(d, 'controller', 'CreateVolume', 'unknown parameter', { ...create, parameters: { ...params, bogus: '1' } }, [
      IA,
    ]);
    add(
      d,
      'controller',
      'CreateVolume',
      '1000 unknown parameters',
      {
        ...create,
        parameters: { ...params, ...Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, 'v'])) },
      },
      [IA],
    );
    add(
      d,
      'controller',
      'CreateVolume',
      "other driver's parameters",
      { ...create, parameters: d === 'proxmox' ? nfsParams : { storage: 'local-lvm' } },
      [IA],
    );
    add(d, 'controller', 'CreateVolume', 'no capabilities', { ...create, volumeCapabilities: [] }, [IA]);
    add(
      d,
      'controller',
      'CreateVolume',
      'capability without access mode',
      { ...create, volumeCapabilities: [{ mount: {} }] },
      [IA],
    );
    if (d === 'proxmox') {
      add(d, 'controller', 'CreateVolume', 'storage "../../etc"', { ...create, parameters: { storage: '../../etc' } }, [
        IA,
      ]);
      add(
        d,
        'controller',
        'CreateVolume',
        'storage with newline',
        { ...create, parameters: { storage: 'local-lvm\nx' } },
        [IA],
      );
      add(
        d,
        'controller',
        'CreateVolume',
        'encrypted "maybe"',
        { ...create, parameters: { storage: 'local-lvm', encrypted: 'maybe' } },
        [IA],
      );
      add(
        d,
        'controller',
        'CreateVolume',
        'zone "../.."',
        { ...create, accessibilityRequirements: topology('../..') },
        [IA, 'RESOURCE_EXHAUSTED'],
      );
    } else {
      add(
        d,
        'controller',
        'CreateVolume',
        'subDir "../../etc"',
        { ...create, parameters: { ...nfsParams, subDir: '../../etc' } },
        [IA],
      );
      add(
        d,
        'controller',
        'CreateVolume',
        'subDir "/abs"',
        { ...create, parameters: { ...nfsParams, subDir: '/abs' } },
        [IA],
      );
      // A share without the leading "/" is taken as absolute; the server then refuses the mount.
      add(
        d,
        'controller',
        'CreateVolume',
        'share "relative"',
        { ...create, parameters: { ...nfsParams, share: 'relative' } },
        [IA, FP],
      );
      add(
        d,
        'controller',
        'CreateVolume',
        'server with NUL',
        { ...create, parameters: { ...nfsParams, server: '127.0.0.1\u0000x' } },
        [IA],
      );
      add(d, 'controller', 'CreateVolume', 'empty server', { ...create, parameters: { ...nfsParams, server: '' } }, [
        IA,
      ]);
      add(
        d,
        'controller',
        'CreateVolume',
        'subDir template traversal',
        {
          ...create,
          parameters: { ...nfsParams, subDir: '${pvc.metadata.namespace}/x', 'csi.storage.k8s.io/pvc/namespace': '..' },
        },
        [IA],
      );
    }
    // DeleteVolume: an id that is not ours may answer OK (nothing to delete), but must delete nothing.
    for (const [label, v] of hostileIds)
      add(d, 'controller', 'DeleteVolume', `id ${label}`, { volumeId: v }, idAllow(label, ['OK', NF]));
    add(d, 'controller', 'DeleteVolume', "other driver's handle", { volumeId: wrong[d] }, [
      IA,
      NF,
      'OK',
      ...(d === 'nfs' ? ['UNAVAILABLE'] : []),
    ]);
    if (d === 'proxmox') {
      add(d, 'controller', 'DeleteVolume', 'boot disk of running VM 101', { volumeId: bootDisk }, [IA, FP]);
      add(
        d,
        'controller',
        'DeleteVolume',
        'disk of another VM (111)',
        { volumeId: 'homelab/hyper1/local-lvm/vm-111-disk-0' },
        [IA, FP],
      );
    } else {
      add(
        d,
        'controller',
        'DeleteVolume',
        'traversal in the handle',
        { volumeId: `${g.server}#${g.share}/talos#../..#x#delete` },
        [IA, 'OK'],
      );
    }
    // Publish / unpublish (the NFS driver does not offer them).
    const pubAllow = (a: string[]) => (d === 'nfs' ? [UNIMPL] : a);
    const publish = { volumeId: own[d], nodeId: 'talos-worker-1', volumeCapability: SINGLE_WRITER };
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ControllerPublishVolume',
        `id ${label}`,
        { ...publish, volumeId: v },
        pubAllow(idAllow(label, [NF])),
      );
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ControllerPublishVolume',
        `node ${label}`,
        { ...publish, nodeId: v },
        pubAllow(idAllow(label, [NF])),
      );
    add(
      d,
      'controller',
      'ControllerPublishVolume',
      "other driver's handle",
      { ...publish, volumeId: wrong[d] },
      pubAllow([IA, NF]),
    );
    add(
      d,
      'controller',
      'ControllerPublishVolume',
      'no capability',
      { ...publish, volumeCapability: undefined },
      pubAllow([IA]),
    );
    if (d === 'proxmox') {
      add(
        d,
        'controller',
        'ControllerPublishVolume',
        'boot disk of running VM 101 to VM 111 (defect 3)',
        { ...publish, volumeId: bootDisk },
        [FP],
      );
      add(
        d,
        'controller',
        'ControllerPublishVolume',
        'boot disk of VM 101 to VM 101 itself',
        { ...publish, volumeId: bootDisk, nodeId: 'talos-cp-1' },
        [FP, IA],
      );
    }
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ControllerUnpublishVolume',
        `id ${label}`,
        { volumeId: v, nodeId: 'talos-worker-1' },
        pubAllow(idAllow(label, ['OK', NF])),
      );
    if (d === 'proxmox')
      add(
        d,
        'controller',
        'ControllerUnpublishVolume',
        'boot disk from its own VM 101',
        { volumeId: bootDisk, nodeId: 'talos-cp-1' },
        [IA, FP, 'OK'],
      );
    // The rest of the controller service.
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ValidateVolumeCapabilities',
        `id ${label}`,
        { volumeId: v, volumeCapabilities: [SINGLE_WRITER] },
        idAllow(label, [NF]),
      );
    // A Proxmox handle also parses as a legacy NFS handle `server/share/subDir/…` naming a server
    // that does not answer: UNAVAILABLE is a fair answer there.
    add(
      d,
      'controller',
      'ValidateVolumeCapabilities',
      "other driver's handle",
      { volumeId: wrong[d], volumeCapabilities: [SINGLE_WRITER] },
      [IA, NF, ...(d === 'nfs' ? ['UNAVAILABLE'] : [])],
    );
    const list = d === 'proxmox' ? [IA, 'ABORTED'] : [UNIMPL];
    add(d, 'controller', 'ListVolumes', 'starting_token garbage', { startingToken: 'garbage\u0000token' }, list);
    add(d, 'controller', 'ListVolumes', 'max_entries -1', { maxEntries: -1 }, d === 'proxmox' ? [IA] : [UNIMPL]);
    // Capacity is asked with the StorageClass's parameters; refusing an unknown one is not required.
    add(
      d,
      'controller',
      'GetCapacity',
      'unknown parameter',
      { parameters: { ...params, bogus: '1' } },
      d === 'proxmox' ? [IA, 'OK'] : [UNIMPL],
    );
    add(
      d,
      'controller',
      'GetCapacity',
      'zone "../.."',
      { parameters: params, accessibleTopology: topology('../..').requisite[0] },
      d === 'proxmox' ? [IA, 'OK'] : [UNIMPL],
    );
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ControllerExpandVolume',
        `id ${label}`,
        { volumeId: v, capacityRange: { requiredBytes: String(2 * GiB) } },
        idAllow(label, [NF]),
      );
    add(
      d,
      'controller',
      'ControllerExpandVolume',
      'required_bytes -1',
      { volumeId: own[d], capacityRange: { requiredBytes: '-1' } },
      [IA, OOR],
    );
    add(
      d,
      'controller',
      'ControllerExpandVolume',
      'limit_bytes -1',
      { volumeId: own[d], capacityRange: { requiredBytes: String(GiB), limitBytes: '-1' } },
      [IA, OOR],
    );
    add(
      d,
      'controller',
      'ControllerExpandVolume',
      "other driver's handle",
      { volumeId: wrong[d], capacityRange: { requiredBytes: String(2 * GiB) } },
      [IA, NF, ...(d === 'nfs' ? ['UNAVAILABLE'] : [])],
    );
    for (const [label, v] of hostileIds)
      add(
        d,
        'controller',
        'ControllerGetVolume',
        `id ${label}`,
        { volumeId: v },
        d === 'proxmox' ? idAllow(label, [NF]) : [UNIMPL],
      );
    if (d === 'proxmox') {
      for (const [label, v] of hostileIds)
        add(
          d,
          'controller',
          'ControllerModifyVolume',
          `id ${label}`,
          { volumeId: v, mutableParameters: { backup: 'true' } },
          idAllow(label, [NF]),
        );
      add(
        d,
        'controller',
        'ControllerModifyVolume',
        'unknown mutable parameter',
        { volumeId: pveId, mutableParameters: { bogus: '1' } },
        [IA],
      );
      add(
        d,
        'controller',
        'ControllerModifyVolume',
        'diskIOPS -1',
        { volumeId: pveId, mutableParameters: { diskIOPS: '-1' } },
        [IA],
      );
      add(
        d,
        'controller',
        'ControllerModifyVolume',
        'backup with a newline',
        { volumeId: pveId, mutableParameters: { backup: 'true\nx' } },
        [IA],
      );
      add(
        d,
        'controller',
        'ControllerModifyVolume',
        'boot disk of running VM 101',
        { volumeId: bootDisk, mutableParameters: { diskIOPS: '100' } },
        [IA, FP, NF],
      );
    }
    for (const m of [
      'CreateSnapshot',
      'DeleteSnapshot',
      'ListSnapshots',
      ...(d === 'nfs' ? ['ControllerModifyVolume'] : []),
    ])
      add(d, 'controller', m, 'not offered', { sourceVolumeId: own[d], name: 'x', snapshotId: 'x', volumeId: own[d] }, [
        UNIMPL,
      ]);

    // Node service.
    add(d, 'node', 'NodeGetCapabilities', 'plain', {}, ['OK']);
    add(d, 'node', 'NodeGetInfo', 'plain', {}, ['OK']);
    const staged = d === 'proxmox';
    const stage = {
      volumeId: pveId,
      stagingTargetPath: path.join(K, 'plugins/kubernetes.io/csi/csi.proxmox.sinextra.dev/x/globalmount'),
      volumeCapability: SINGLE_WRITER,
      publishContext: { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '1' },
    };
    const ctx = d === 'proxmox' ? {} : { server: g.server, share: `${g.share}/talos`, subDir: 'pvc-chaos-input' };
    const publishN = {
      volumeId: own[d],
      targetPath: path.join(K, 'pods/p9/volumes/kubernetes.io~csi/x/mount'),
      volumeCapability: SINGLE_WRITER,
      volumeContext: ctx,
      ...(staged && { stagingTargetPath: stage.stagingTargetPath }),
    };
    const st = (a: string[]) => (staged ? a : [UNIMPL]);
    for (const [label, p, allow] of hostilePaths) {
      add(
        d,
        'node',
        'NodeStageVolume',
        `staging path ${label}`,
        { ...stage, volumeId: own[d], stagingTargetPath: p },
        st(allow),
      );
      add(
        d,
        'node',
        'NodeUnstageVolume',
        `staging path ${label}`,
        { volumeId: own[d], stagingTargetPath: p },
        st(allow),
      );
      add(d, 'node', 'NodePublishVolume', `target ${label}`, { ...publishN, targetPath: p }, allow);
      add(d, 'node', 'NodeUnpublishVolume', `target ${label}`, { volumeId: own[d], targetPath: p }, allow);
      // csi-sanity wants NOT_FOUND for a relative volume path ("some/path") in these two.
      const statAllow = label === 'relative' ? [IA, NF] : allow;
      add(d, 'node', 'NodeGetVolumeStats', `volume path ${label}`, { volumeId: own[d], volumePath: p }, statAllow);
      add(
        d,
        'node',
        'NodeExpandVolume',
        `volume path ${label}`,
        { volumeId: own[d], volumePath: p, capacityRange: { requiredBytes: String(2 * GiB) } },
        staged ? statAllow : [UNIMPL],
      );
    }
    if (staged) {
      add(d, 'node', 'NodePublishVolume', 'staging path "/"', { ...publishN, stagingTargetPath: '/' }, [IA]);
      add(
        d,
        'node',
        'NodeStageVolume',
        'DevicePath /etc/passwd',
        { ...stage, publishContext: { DevicePath: '/etc/passwd', lun: '1' } },
        [IA, NF, FP],
      );
      add(
        d,
        'node',
        'NodeStageVolume',
        'lun -1',
        { ...stage, publishContext: { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '-1' } },
        [IA, NF, FP],
      );
      add(d, 'node', 'NodeStageVolume', 'no publish context', { ...stage, publishContext: {} }, [IA, NF, FP]);
      add(
        d,
        'node',
        'NodeUnstageVolume',
        'made-up id, unrelated mount at the staging path',
        { volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-made-up', stagingTargetPath: stagingForeign },
        [FP, 'OK', NF],
      );
      add(
        d,
        'node',
        'NodeExpandVolume',
        'required_bytes -1',
        {
          volumeId: pveId,
          volumePath: path.join(K, 'pods/p9/volumes/kubernetes.io~csi/x/mount'),
          capacityRange: { requiredBytes: '-1' },
        },
        [IA, OOR, NF],
      );
    } else {
      add(
        d,
        'node',
        'NodePublishVolume',
        'context share "../x"',
        { ...publishN, volumeContext: { ...ctx, share: '../x' } },
        [IA],
      );
      add(
        d,
        'node',
        'NodePublishVolume',
        'context subDir "../../.."',
        { ...publishN, volumeContext: { ...ctx, subDir: '../../..' } },
        [IA],
      );
      add(
        d,
        'node',
        'NodePublishVolume',
        'context server empty',
        { ...publishN, volumeContext: { ...ctx, server: '' } },
        [IA],
      );
      const inline = { ...ctx, 'csi.storage.k8s.io/ephemeral': 'true' };
      add(
        d,
        'node',
        'NodePublishVolume',
        'inline volume, subDir "../.."',
        { ...publishN, volumeContext: { ...inline, subDir: '../..' } },
        [IA],
      );
      add(
        d,
        'node',
        'NodePublishVolume',
        'inline volume, subDir with NUL',
        { ...publishN, volumeContext: { ...inline, subDir: 'a\u0000b' } },
        [IA],
      );
    }
    const madeUp =
      d === 'proxmox' ? 'homelab/hyper1/local-lvm/vm-9999-pvc-made-up' : `${g.server}#${g.share}/talos#made-up##`;
    add(
      d,
      'node',
      'NodeUnpublishVolume',
      'made-up id, unrelated mount at the target',
      { volumeId: madeUp, targetPath: foreign },
      [FP, 'OK', NF],
    );
    add(
      d,
      'node',
      'NodeUnpublishVolume',
      'made-up id, a file holding data at the target',
      { volumeId: madeUp, targetPath: plain },
      [FP, 'OK', NF],
    );
    add(d, 'node', 'NodeUnpublishVolume', 'target is a symlink to outside', { volumeId: madeUp, targetPath: link }, [
      IA,
      FP,
      'OK',
      NF,
    ]);
    for (const [label, v] of hostileIds)
      add(
        d,
        'node',
        'NodeUnpublishVolume',
        `id ${label}`,
        { volumeId: v, targetPath: path.join(K, 'pods/p9/volumes/kubernetes.io~csi/x/mount') },
        idAllow(label, ['OK', NF]),
      );
  }

  for (const r of rows) {
    if (r.allow.includes(UNIMPL) && !r.allow.includes(IA)) r.allow.push(IA);
    rec.ops++;
    // Refusing bad input takes no backend work: 5 s is plenty, and keeps a hanging row cheap.
    const a = await csi[r.driver].once(r.svc, r.method, r.req, { deadlineMs: 5_000 });
    if (!r.allow.includes(a.code))
      rec.violate(
        `${r.driver} ${r.method} (${r.label}): ${a.code} ${a.message.slice(0, 160).replace(/\s+/g, ' ')} — allowed: ${r.allow.join(', ')}`,
      );
    // Whatever a hostile create made goes again (a leak check follows).
    if (a.code === 'OK' && r.method === 'CreateVolume')
      await csi[r.driver].op(
        'controller',
        'DeleteVolume',
        { volumeId: volumeIdOf(a) },
        { until: 'ok', budgetMs: 30_000 },
      );
    if (!prog.alive()) {
      rec.violate(`the program died after ${r.driver} ${r.method} (${r.label})`);
      break;
    }
  }

  // The invariants the rows must not have broken.
  if (prog.alive()) {
    for (const d of ['proxmox', 'nfs'] as Driver[]) {
      const p = await csi[d].once('identity', 'Probe', {});
      const ready = field(p.res, 'ready', 'value');
      if (p.code !== 'OK' || ready === false)
        rec.violate(`${d}: Probe after the table: ${p.code} ready=${String(ready)}`);
    }
    const after = mountTable();
    const gone = before.filter((m) => !after.includes(m));
    const added = after.filter((m) => !before.includes(m));
    if (gone.length)
      rec.violate(
        `mounts gone from the program's namespace: ${gone.slice(0, 8).join(', ')}${gone.length > 8 ? ` … (${gone.length})` : ''}`,
      );
    if (added.length) rec.violate(`mounts added in the program's namespace: ${added.join(', ')}`);
    if (added.length) rec.leaks.mount = added.length;
    if (gone.length) rec.leaks['mount removed'] = gone.length;
    for (const f of [`${OUT}/data`, `${foreign}/data`, `${stagingForeign}/data`]) {
      if (!fs.existsSync(`/proc/${pid}/root${f}`))
        rec.violate(`planted file ${f} is gone (inside the program's namespace)`);
    }
  }
  if (!fs.existsSync(plain) || fs.readFileSync(plain, 'utf8') === '')
    rec.violate(`the file holding data at ${plain} was deleted or emptied`);
  if (!fs.lstatSync(link, { throwIfNoEntry: false })?.isSymbolicLink())
    rec.violate(`the symlink at ${link} was removed`);
  if (!fs.existsSync(path.join(talos, 'sentinel', 'keep'))) rec.violate("the export's sentinel directory was deleted");
  const exportAfter = fs.readdirSync(talos).sort();
  const newDirs = exportAfter.filter((e) => !exportBefore.includes(e));
  if (newDirs.length) {
    rec.leaks.directory = newDirs.length;
    rec.violate(`new entries on the export: ${newDirs.join(', ')}`);
  }

  await csi.proxmox.op('controller', 'DeleteVolume', { volumeId: pveId }, { until: 'ok', budgetMs: 30_000 });
  await csi.nfs.op('controller', 'DeleteVolume', { volumeId: nfsId }, { until: 'ok', budgetMs: 30_000 });
  for (const c of Object.values(csi)) c.close();
  await prog.stop();
  await auditProxmox(admin, rec, { base: baseState });
  fs.rmSync(path.join(talos, 'sentinel'), { recursive: true, force: true });
  return rec;
}
