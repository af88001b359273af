// The bad-input scenario's table: for every RPC of both drivers, hostile requests and the answers
// each may get. Pure: the paths, the shared export and the real volumes come from the scenario.
import path from 'node:path';
import { GiB, SINGLE_WRITER, topology } from './env.js';
import type { Service } from './rpc.js';

export type Driver = 'proxmox' | 'nfs';
export interface Row {
  driver: Driver;
  svc: Service;
  method: string;
  label: string;
  req: object;
  allow: string[];
}

export const CODES = {
  IA: 'INVALID_ARGUMENT',
  NF: 'NOT_FOUND',
  FP: 'FAILED_PRECONDITION',
  OOR: 'OUT_OF_RANGE',
  // A method a driver does not offer may check the spec's required fields first.
  UNIMPL: 'UNIMPLEMENTED',
} as const;
const { IA, NF, FP, OOR, UNIMPL } = CODES;

export interface InputContext {
  /** The kubelet directory, and a directory outside it (a tmpfs with a planted file). */
  K: string;
  OUT: string;
  /** A pod path with an unrelated mount, one with a file holding data, one a symlink to OUT. */
  foreign: string;
  plain: string;
  link: string;
  /** A staging path with an unrelated mount. */
  stagingForeign: string;
  g: { server: string; share: string };
  nfsParams: Record<string, string>;
  /** Real volumes of each driver, for rows that need one that exists. */
  pveId: string;
  nfsId: string;
}

export function inputRows({
  K,
  OUT,
  foreign,
  plain,
  link,
  stagingForeign,
  g,
  nfsParams,
  pveId,
  nfsId,
}: InputContext): Row[] {
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

  for (const d of ['proxmox', 'nfs'] as Driver[]) {
    /** Adds this driver's rows of one method: a label, the request, the answers it allows. */
    const rowOf = (svc: Service, method: string) => (label: string, req: object, allow: string[]) =>
      rows.push({ driver: d, svc, method, label, req, allow });
    const getPluginInfo = rowOf('identity', 'GetPluginInfo');
    const getPluginCapabilities = rowOf('identity', 'GetPluginCapabilities');
    const probe = rowOf('identity', 'Probe');
    const controllerGetCapabilities = rowOf('controller', 'ControllerGetCapabilities');
    const createVolume = rowOf('controller', 'CreateVolume');
    const deleteVolume = rowOf('controller', 'DeleteVolume');
    const controllerPublishVolume = rowOf('controller', 'ControllerPublishVolume');
    const controllerUnpublishVolume = rowOf('controller', 'ControllerUnpublishVolume');
    const validateVolumeCapabilities = rowOf('controller', 'ValidateVolumeCapabilities');
    const listVolumes = rowOf('controller', 'ListVolumes');
    const getCapacity = rowOf('controller', 'GetCapacity');
    const controllerExpandVolume = rowOf('controller', 'ControllerExpandVolume');
    const controllerGetVolume = rowOf('controller', 'ControllerGetVolume');
    const controllerModifyVolume = rowOf('controller', 'ControllerModifyVolume');
    const nodeGetCapabilities = rowOf('node', 'NodeGetCapabilities');
    const nodeGetInfo = rowOf('node', 'NodeGetInfo');
    const nodeStageVolume = rowOf('node', 'NodeStageVolume');
    const nodeUnstageVolume = rowOf('node', 'NodeUnstageVolume');
    const nodePublishVolume = rowOf('node', 'NodePublishVolume');
    const nodeUnpublishVolume = rowOf('node', 'NodeUnpublishVolume');
    const nodeGetVolumeStats = rowOf('node', 'NodeGetVolumeStats');
    const nodeExpandVolume = rowOf('node', 'NodeExpandVolume');
    const params = d === 'proxmox' ? { storage: 'local-lvm' } : nfsParams;
    const create = {
      name: 'pvc-chaos-input-x',
      parameters: params,
      volumeCapabilities: [SINGLE_WRITER],
      capacityRange: { requiredBytes: String(GiB) },
      ...(d === 'proxmox' && { accessibilityRequirements: topology('hyper1') }),
    };
    // Identity: nothing to get wrong, but it must answer.
    getPluginInfo('plain', {}, ['OK']);
    getPluginCapabilities('plain', {}, ['OK']);
    probe('plain', {}, ['OK']);
    controllerGetCapabilities('plain', {}, ['OK']);
    // CreateVolume
    for (const [label, v] of hostileIds)
      createVolume(
        `name ${label}`,
        { ...create, name: v },
        label === 'empty' || label === 'NUL' || label === 'control chars' ? [IA] : [IA, 'OK'],
      );
    createVolume('required_bytes -1', { ...create, capacityRange: { requiredBytes: '-1' } }, [IA, OOR]);
    createVolume('limit_bytes -5', { ...create, capacityRange: { limitBytes: '-5' } }, [IA, OOR]);
    createVolume(
      'required > limit',
      { ...create, capacityRange: { requiredBytes: String(2 * GiB), limitBytes: String(GiB) } },
      [IA, OOR],
    );
    createVolume('required 2^63-1', { ...create, capacityRange: { requiredBytes: '9223372036854775807' } }, [
      IA,
      OOR,
      'RESOURCE_EXHAUSTED',
      ...(d === 'nfs' ? ['OK'] : []),
    ]);
    createVolume('unknown parameter', { ...create, parameters: { ...params, bogus: '1' } }, [IA]);
    createVolume(
      '1000 unknown parameters',
      {
        ...create,
        parameters: { ...params, ...Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, 'v'])) },
      },
      [IA],
    );
    createVolume(
      "other driver's parameters",
      { ...create, parameters: d === 'proxmox' ? nfsParams : { storage: 'local-lvm' } },
      [IA],
    );
    createVolume('no capabilities', { ...create, volumeCapabilities: [] }, [IA]);
    createVolume('capability without access mode', { ...create, volumeCapabilities: [{ mount: {} }] }, [IA]);
    if (d === 'proxmox') {
      createVolume('storage "../../etc"', { ...create, parameters: { storage: '../../etc' } }, [IA]);
      createVolume('storage with newline', { ...create, parameters: { storage: 'local-lvm\nx' } }, [IA]);
      createVolume('encrypted "maybe"', { ...create, parameters: { storage: 'local-lvm', encrypted: 'maybe' } }, [IA]);
      createVolume('zone "../.."', { ...create, accessibilityRequirements: topology('../..') }, [
        IA,
        'RESOURCE_EXHAUSTED',
      ]);
    } else {
      createVolume('subDir "../../etc"', { ...create, parameters: { ...nfsParams, subDir: '../../etc' } }, [IA]);
      createVolume('subDir "/abs"', { ...create, parameters: { ...nfsParams, subDir: '/abs' } }, [IA]);
      // A share without the leading "/" is taken as absolute; the server then refuses the mount.
      createVolume('share "relative"', { ...create, parameters: { ...nfsParams, share: 'relative' } }, [IA, FP]);
      createVolume('server with NUL', { ...create, parameters: { ...nfsParams, server: '127.0.0.1\u0000x' } }, [IA]);
      createVolume('empty server', { ...create, parameters: { ...nfsParams, server: '' } }, [IA]);
      createVolume(
        'subDir template traversal',
        {
          ...create,
          parameters: { ...nfsParams, subDir: '${pvc.metadata.namespace}/x', 'csi.storage.k8s.io/pvc/namespace': '..' },
        },
        [IA],
      );
    }
    // DeleteVolume: an id that is not ours may answer OK (nothing to delete), but must delete nothing.
    for (const [label, v] of hostileIds) deleteVolume(`id ${label}`, { volumeId: v }, idAllow(label, ['OK', NF]));
    deleteVolume("other driver's handle", { volumeId: wrong[d] }, [
      IA,
      NF,
      'OK',
      ...(d === 'nfs' ? ['UNAVAILABLE'] : []),
    ]);
    if (d === 'proxmox') {
      deleteVolume('boot disk of running VM 101', { volumeId: bootDisk }, [IA, FP]);
      deleteVolume('disk of another VM (111)', { volumeId: 'homelab/hyper1/local-lvm/vm-111-disk-0' }, [IA, FP]);
    } else {
      deleteVolume('traversal in the handle', { volumeId: `${g.server}#${g.share}/talos#../..#x#delete` }, [IA, 'OK']);
    }
    // Publish / unpublish (the NFS driver does not offer them).
    const pubAllow = (a: string[]) => (d === 'nfs' ? [UNIMPL] : a);
    const publish = { volumeId: own[d], nodeId: 'talos-worker-1', volumeCapability: SINGLE_WRITER };
    for (const [label, v] of hostileIds)
      controllerPublishVolume(`id ${label}`, { ...publish, volumeId: v }, pubAllow(idAllow(label, [NF])));
    for (const [label, v] of hostileIds)
      controllerPublishVolume(`node ${label}`, { ...publish, nodeId: v }, pubAllow(idAllow(label, [NF])));
    controllerPublishVolume("other driver's handle", { ...publish, volumeId: wrong[d] }, pubAllow([IA, NF]));
    controllerPublishVolume('no capability', { ...publish, volumeCapability: undefined }, pubAllow([IA]));
    if (d === 'proxmox') {
      controllerPublishVolume(
        'boot disk of running VM 101 to VM 111 (docs/design.md#foreign-disks)',
        { ...publish, volumeId: bootDisk },
        [FP],
      );
      controllerPublishVolume(
        'boot disk of VM 101 to VM 101 itself',
        { ...publish, volumeId: bootDisk, nodeId: 'talos-cp-1' },
        [FP, IA],
      );
    }
    for (const [label, v] of hostileIds)
      controllerUnpublishVolume(
        `id ${label}`,
        { volumeId: v, nodeId: 'talos-worker-1' },
        pubAllow(idAllow(label, ['OK', NF])),
      );
    if (d === 'proxmox')
      controllerUnpublishVolume('boot disk from its own VM 101', { volumeId: bootDisk, nodeId: 'talos-cp-1' }, [
        IA,
        FP,
        'OK',
      ]);
    // The rest of the controller service.
    for (const [label, v] of hostileIds)
      validateVolumeCapabilities(
        `id ${label}`,
        { volumeId: v, volumeCapabilities: [SINGLE_WRITER] },
        idAllow(label, [NF]),
      );
    // A Proxmox handle also parses as a legacy NFS handle `server/share/subDir/…` naming a server
    // that does not answer: UNAVAILABLE is a fair answer there.
    validateVolumeCapabilities("other driver's handle", { volumeId: wrong[d], volumeCapabilities: [SINGLE_WRITER] }, [
      IA,
      NF,
      ...(d === 'nfs' ? ['UNAVAILABLE'] : []),
    ]);
    const list = d === 'proxmox' ? [IA, 'ABORTED'] : [UNIMPL];
    listVolumes('starting_token garbage', { startingToken: 'garbage\u0000token' }, list);
    listVolumes('max_entries -1', { maxEntries: -1 }, d === 'proxmox' ? [IA] : [UNIMPL]);
    // Capacity is asked with the StorageClass's parameters; refusing an unknown one is not required.
    getCapacity(
      'unknown parameter',
      { parameters: { ...params, bogus: '1' } },
      d === 'proxmox' ? [IA, 'OK'] : [UNIMPL],
    );
    getCapacity(
      'zone "../.."',
      { parameters: params, accessibleTopology: topology('../..').requisite[0] },
      d === 'proxmox' ? [IA, 'OK'] : [UNIMPL],
    );
    for (const [label, v] of hostileIds)
      controllerExpandVolume(
        `id ${label}`,
        { volumeId: v, capacityRange: { requiredBytes: String(2 * GiB) } },
        idAllow(label, [NF]),
      );
    controllerExpandVolume('required_bytes -1', { volumeId: own[d], capacityRange: { requiredBytes: '-1' } }, [
      IA,
      OOR,
    ]);
    controllerExpandVolume(
      'limit_bytes -1',
      { volumeId: own[d], capacityRange: { requiredBytes: String(GiB), limitBytes: '-1' } },
      [IA, OOR],
    );
    controllerExpandVolume(
      "other driver's handle",
      { volumeId: wrong[d], capacityRange: { requiredBytes: String(2 * GiB) } },
      [IA, NF, ...(d === 'nfs' ? ['UNAVAILABLE'] : [])],
    );
    for (const [label, v] of hostileIds)
      controllerGetVolume(`id ${label}`, { volumeId: v }, d === 'proxmox' ? idAllow(label, [NF]) : [UNIMPL]);
    if (d === 'proxmox') {
      for (const [label, v] of hostileIds)
        controllerModifyVolume(
          `id ${label}`,
          { volumeId: v, mutableParameters: { backup: 'true' } },
          idAllow(label, [NF]),
        );
      controllerModifyVolume('unknown mutable parameter', { volumeId: pveId, mutableParameters: { bogus: '1' } }, [IA]);
      controllerModifyVolume('diskIOPS -1', { volumeId: pveId, mutableParameters: { diskIOPS: '-1' } }, [IA]);
      controllerModifyVolume('backup with a newline', { volumeId: pveId, mutableParameters: { backup: 'true\nx' } }, [
        IA,
      ]);
      controllerModifyVolume(
        'boot disk of running VM 101',
        { volumeId: bootDisk, mutableParameters: { diskIOPS: '100' } },
        [IA, FP, NF],
      );
    }
    if (d === 'nfs') controllerModifyVolume('not offered', { volumeId: own[d] }, [UNIMPL]);
    // Snapshots: hostile handles and names only; none of these may make a snapshot (the audit
    // counts what appears on the export and in the simulator).
    const createSnapshot = rowOf('controller', 'CreateSnapshot');
    const deleteSnapshot = rowOf('controller', 'DeleteSnapshot');
    const listSnapshots = rowOf('controller', 'ListSnapshots');
    for (const [label, v] of hostileIds) {
      createSnapshot(`source ${label}`, { name: 'snap-chaos-input', sourceVolumeId: v }, idAllow(label, [NF]));
      // A snapshot that does not exist is deleted already (CSI: OK).
      deleteSnapshot(`id ${label}`, { snapshotId: v }, idAllow(label, ['OK', NF]));
      listSnapshots(`snapshot id ${label}`, { snapshotId: v }, ['OK', IA]);
      listSnapshots(`source ${label}`, { sourceVolumeId: v }, ['OK', IA]);
    }
    // A Proxmox handle reads as a legacy NFS handle (server "homelab"): UNAVAILABLE, as for expansion.
    createSnapshot("other driver's handle", { name: 'snap-chaos-input', sourceVolumeId: wrong[d] }, [
      IA,
      NF,
      ...(d === 'nfs' ? ['UNAVAILABLE'] : []),
    ]);
    createSnapshot('empty name', { name: '', sourceVolumeId: own[d] }, [IA]);
    createSnapshot('name with NUL', { name: 'snap\u0000x', sourceVolumeId: own[d] }, [IA]);
    createSnapshot('huge name (1 MiB)', { name: 'x'.repeat(1 << 20), sourceVolumeId: own[d] }, [IA]);
    listSnapshots('negative max_entries', { maxEntries: -1 }, [IA]);
    listSnapshots('bogus starting token', { startingToken: 'not-a-token' }, ['ABORTED', IA]);

    // Node service.
    nodeGetCapabilities('plain', {}, ['OK']);
    nodeGetInfo('plain', {}, ['OK']);
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
      nodeStageVolume(`staging path ${label}`, { ...stage, volumeId: own[d], stagingTargetPath: p }, st(allow));
      nodeUnstageVolume(`staging path ${label}`, { volumeId: own[d], stagingTargetPath: p }, st(allow));
      nodePublishVolume(`target ${label}`, { ...publishN, targetPath: p }, allow);
      nodeUnpublishVolume(`target ${label}`, { volumeId: own[d], targetPath: p }, allow);
      // csi-sanity wants NOT_FOUND for a relative volume path ("some/path") in these two.
      const statAllow = label === 'relative' ? [IA, NF] : allow;
      nodeGetVolumeStats(`volume path ${label}`, { volumeId: own[d], volumePath: p }, statAllow);
      nodeExpandVolume(
        `volume path ${label}`,
        { volumeId: own[d], volumePath: p, capacityRange: { requiredBytes: String(2 * GiB) } },
        staged ? statAllow : [UNIMPL],
      );
    }
    if (staged) {
      nodePublishVolume('staging path "/"', { ...publishN, stagingTargetPath: '/' }, [IA]);
      nodeStageVolume('DevicePath /etc/passwd', { ...stage, publishContext: { DevicePath: '/etc/passwd', lun: '1' } }, [
        IA,
        NF,
        FP,
      ]);
      nodeStageVolume(
        'lun -1',
        { ...stage, publishContext: { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '-1' } },
        [IA, NF, FP],
      );
      nodeStageVolume('no publish context', { ...stage, publishContext: {} }, [IA, NF, FP]);
      nodeUnstageVolume(
        'made-up id, unrelated mount at the staging path',
        { volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-made-up', stagingTargetPath: stagingForeign },
        [FP, 'OK', NF],
      );
      nodeExpandVolume(
        'required_bytes -1',
        {
          volumeId: pveId,
          volumePath: path.join(K, 'pods/p9/volumes/kubernetes.io~csi/x/mount'),
          capacityRange: { requiredBytes: '-1' },
        },
        [IA, OOR, NF],
      );
    } else {
      nodePublishVolume('context share "../x"', { ...publishN, volumeContext: { ...ctx, share: '../x' } }, [IA]);
      nodePublishVolume('context subDir "../../.."', { ...publishN, volumeContext: { ...ctx, subDir: '../../..' } }, [
        IA,
      ]);
      nodePublishVolume('context server empty', { ...publishN, volumeContext: { ...ctx, server: '' } }, [IA]);
      const inline = { ...ctx, 'csi.storage.k8s.io/ephemeral': 'true' };
      nodePublishVolume(
        'inline volume, subDir "../.."',
        { ...publishN, volumeContext: { ...inline, subDir: '../..' } },
        [IA],
      );
      nodePublishVolume(
        'inline volume, subDir with NUL',
        { ...publishN, volumeContext: { ...inline, subDir: 'a\u0000b' } },
        [IA],
      );
    }
    const madeUp =
      d === 'proxmox' ? 'homelab/hyper1/local-lvm/vm-9999-pvc-made-up' : `${g.server}#${g.share}/talos#made-up##`;
    nodeUnpublishVolume('made-up id, unrelated mount at the target', { volumeId: madeUp, targetPath: foreign }, [
      FP,
      'OK',
      NF,
    ]);
    nodeUnpublishVolume('made-up id, a file holding data at the target', { volumeId: madeUp, targetPath: plain }, [
      FP,
      'OK',
      NF,
    ]);
    nodeUnpublishVolume('target is a symlink to outside', { volumeId: madeUp, targetPath: link }, [IA, FP, 'OK', NF]);
    for (const [label, v] of hostileIds)
      nodeUnpublishVolume(
        `id ${label}`,
        { volumeId: v, targetPath: path.join(K, 'pods/p9/volumes/kubernetes.io~csi/x/mount') },
        idAllow(label, ['OK', NF]),
      );
  }
  return rows;
}
