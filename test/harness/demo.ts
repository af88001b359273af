// `npm run demo`: the main job on an embedded default. Starts the Proxmox simulator (disks are
// sparse files on loop devices), a ganesha NFS server, and the program with both drivers, then
// walks one volume of each kind through its lifecycle over gRPC and prints what happened.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { start, stopAll } from './procs.js';
import {
  HOST_NODE,
  socketEndpointArgs,
  startNfsBackend,
  startProxmoxBackend,
  type Backends,
  type NfsInfo,
  type ProxmoxInfo,
} from './backends.js';
import { csiClient, type VolumeCapability } from '../helpers/csi-client.js';
import { present } from '../helpers/present.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const runDir = path.join(ROOT, '.run', 'demo');
const started = Date.now();
const step = (what: string, detail = '') =>
  console.log(`[${((Date.now() - started) / 1000).toFixed(2).padStart(6)}s] ${what}${detail ? `  ${detail}` : ''}`);

async function proxmoxCalls(adminUrl: string): Promise<number> {
  const r = await fetch(`${adminUrl}/counters`);
  const j = (await r.json()) as { total?: number };
  return j.total ?? 0;
}

async function demo(pve: Backends<ProxmoxInfo>, nfs: Backends<NfsInfo>): Promise<void> {
  const pveSock = path.join(runDir, 'proxmox.sock');
  const nfsSock = path.join(runDir, 'nfs.sock');
  const program = start(
    'pve-nfs-csi',
    process.execPath,
    [
      path.join(ROOT, 'dist/src/main.js'),
      '--mode',
      'all',
      ...socketEndpointArgs(pveSock, nfsSock),
      ...pve.controllerArgs,
      ...pve.nodeArgs,
      ...nfs.controllerArgs,
      '--kubelet-dir',
      runDir,
    ],
    { logFile: path.join(runDir, 'program.log') },
  );
  await program.readyJson((j) => j.ready === true, 30_000);
  step('program serving both drivers', `${pveSock}, ${nfsSock} (log: ${path.relative(ROOT, program.logFile)})`);

  const p = csiClient(`unix://${pveSock}`);
  const n = csiClient(`unix://${nfsSock}`);
  // When a step fails, the steps that succeeded are undone in reverse so nothing stays mounted,
  // attached or allocated.
  const undo: (() => Promise<unknown>)[] = [];
  try {
    console.log('\n--- csi.proxmox.sinextra.dev: a local-lvm disk hot-plugged into the VM', HOST_NODE.name);
    // xfs: growing a mounted ext4 needs CAP_SYS_RESOURCE, which some sandboxes (this CI's included) withhold.
    const mountCap: VolumeCapability = { mount: { fsType: 'xfs' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
    let calls = await proxmoxCalls(pve.info.adminUrl);
    const before = () =>
      proxmoxCalls(pve.info.adminUrl).then((c) => {
        const d = c - calls;
        calls = c;
        return `${d} Proxmox API calls`;
      });
    const created = await p.controller.CreateVolume({
      name: 'pvc-0b1c2d3e-demo',
      capacityRange: { requiredBytes: 1 << 30 },
      volumeCapabilities: [mountCap],
      parameters: { storage: 'local-lvm', cache: 'writethrough', ssd: 'true', backup: 'true' },
      accessibilityRequirements: {
        preferred: [
          {
            segments: {
              'topology.kubernetes.io/region': HOST_NODE.region,
              'topology.kubernetes.io/zone': HOST_NODE.zone,
            },
          },
        ],
      },
    });
    const vol = present(created.volume, 'CreateVolume: volume');
    undo.push(() => p.controller.DeleteVolume({ volumeId: vol.volumeId }));
    step('CreateVolume', `${vol.volumeId} ${Number(vol.capacityBytes) / 2 ** 30} GiB; ${await before()}`);
    const pub = await p.controller.ControllerPublishVolume({
      volumeId: vol.volumeId,
      nodeId: HOST_NODE.name,
      volumeCapability: mountCap,
      volumeContext: vol.volumeContext,
    });
    undo.push(() => p.controller.ControllerUnpublishVolume({ volumeId: vol.volumeId, nodeId: HOST_NODE.name }));
    step('ControllerPublishVolume', `${JSON.stringify(pub.publishContext)}; ${await before()}`);
    const staging = path.join(runDir, 'staging');
    const target = path.join(runDir, 'target');
    await p.node.NodeStageVolume({
      volumeId: vol.volumeId,
      publishContext: pub.publishContext,
      stagingTargetPath: staging,
      volumeCapability: mountCap,
      volumeContext: vol.volumeContext,
    });
    undo.push(() => p.node.NodeUnstageVolume({ volumeId: vol.volumeId, stagingTargetPath: staging }));
    step('NodeStageVolume', `found by WWN, formatted xfs, mounted at ${path.relative(ROOT, staging)}`);
    await p.node.NodePublishVolume({
      volumeId: vol.volumeId,
      publishContext: pub.publishContext,
      stagingTargetPath: staging,
      targetPath: target,
      volumeCapability: mountCap,
      volumeContext: vol.volumeContext,
    });
    undo.push(() => p.node.NodeUnpublishVolume({ volumeId: vol.volumeId, targetPath: target }));
    fs.writeFileSync(path.join(target, 'hello.txt'), 'written through the pod mount\n');
    step('NodePublishVolume', `bind-mounted at ${path.relative(ROOT, target)}; wrote hello.txt`);
    const stats = await p.node.NodeGetVolumeStats({ volumeId: vol.volumeId, volumePath: target });
    const bytes = present(
      stats.usage.find((u) => u.unit === 'BYTES'),
      'NodeGetVolumeStats: BYTES usage',
    );
    step(
      'NodeGetVolumeStats',
      `total ${(Number(bytes.total) / 2 ** 20).toFixed(0)} MiB, used ${(Number(bytes.used) / 2 ** 20).toFixed(1)} MiB`,
    );
    const exp = await p.controller.ControllerExpandVolume({
      volumeId: vol.volumeId,
      capacityRange: { requiredBytes: 2 * 2 ** 30 },
      volumeCapability: mountCap,
    });
    step(
      'ControllerExpandVolume (online, through the VM)',
      `${Number(exp.capacityBytes) / 2 ** 30} GiB, node expansion required: ${exp.nodeExpansionRequired}; ${await before()}`,
    );
    const nexp = await p.node.NodeExpandVolume({
      volumeId: vol.volumeId,
      volumePath: target,
      stagingTargetPath: staging,
      capacityRange: { requiredBytes: 2 * 2 ** 30 },
      volumeCapability: mountCap,
    });
    step('NodeExpandVolume', `filesystem grown to ${(Number(nexp.capacityBytes) / 2 ** 30).toFixed(2)} GiB`);
    await p.node.NodeUnpublishVolume({ volumeId: vol.volumeId, targetPath: target });
    await p.node.NodeUnstageVolume({ volumeId: vol.volumeId, stagingTargetPath: staging });
    undo.splice(2);
    step('NodeUnpublishVolume + NodeUnstageVolume', 'unmounted, paths removed');
    await p.controller.ControllerUnpublishVolume({ volumeId: vol.volumeId, nodeId: HOST_NODE.name });
    undo.splice(1);
    step('ControllerUnpublishVolume', `unlinked and confirmed gone from config and pending; ${await before()}`);
    await p.controller.DeleteVolume({ volumeId: vol.volumeId });
    undo.splice(0);
    step('DeleteVolume', `disk freed; ${await before()}`);

    console.log('\n--- nfs.csi.k8s.io: a directory per claim, archived on delete');
    const nfsCap: VolumeCapability = { mount: {}, accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' } };
    const params = {
      ...nfs.volumeParameters,
      subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
      onDelete: 'archive',
      uid: '1000',
      gid: '1000',
      mountPermissions: '0750',
      'csi.storage.k8s.io/pvc/namespace': 'media',
      'csi.storage.k8s.io/pvc/name': 'library',
      'csi.storage.k8s.io/pv/name': 'pvc-7f3e-demo',
    };
    const nv = present(
      (
        await n.controller.CreateVolume({
          name: 'pvc-7f3e-demo',
          volumeCapabilities: [nfsCap],
          parameters: params,
          capacityRange: { requiredBytes: 1 << 30 },
        })
      ).volume,
      'CreateVolume: volume',
    );
    const exportDir = nfs.info.exportDir;
    const dir = path.join(exportDir, 'talos', 'media', 'library');
    const st = fs.statSync(dir);
    step(
      'CreateVolume',
      `${nv.volumeId}; created ${path.relative(exportDir, dir)} over NFS, owner ${st.uid}:${st.gid}, mode ${(st.mode & 0o777).toString(8)}`,
    );
    fs.writeFileSync(path.join(dir, 'book.txt'), 'a pod wrote this\n');
    step(
      '(a pod writes)',
      'book.txt (written on the export directly: the host kernel has no NFS client; the VM tier mounts for real)',
    );
    await n.controller.DeleteVolume({ volumeId: nv.volumeId });
    const archived = path.join(exportDir, 'talos', 'archived-media', 'library');
    step(
      'DeleteVolume (onDelete: archive)',
      `renamed to ${path.relative(exportDir, archived)}; book.txt kept: ${fs.existsSync(path.join(archived, 'book.txt'))}`,
    );
    const again = present(
      (await n.controller.CreateVolume({ name: 'pvc-7f3e-demo', volumeCapabilities: [nfsCap], parameters: params }))
        .volume,
      'CreateVolume: volume',
    );
    await n.controller.DeleteVolume({ volumeId: again.volumeId });
    const beside = fs.readdirSync(path.join(exportDir, 'talos', 'archived-media')).join(', ');
    step('same claim created and deleted again', `archived beside the first instead of getting stuck: ${beside}`);
  } catch (e) {
    for (const f of undo.reverse()) await f().catch(() => undefined);
    throw e;
  } finally {
    p.close();
    n.close();
  }
  const code = await program.stop('SIGTERM');
  step('SIGTERM', `program drained and exited with ${code}`);
}

async function main(): Promise<number> {
  fs.rmSync(runDir, { recursive: true, force: true });
  fs.mkdirSync(runDir, { recursive: true });
  step('starting the Proxmox VE simulator (loop-device disks) and ganesha (NFS on 127.0.0.1)');
  const pve = await startProxmoxBackend(path.join(runDir, 'pve'));
  let nfs: Backends<NfsInfo> | undefined;
  try {
    nfs = await startNfsBackend(path.join(runDir, 'nfs'));
    step('backends ready', `Proxmox API ${pve.info.url}, NFS 127.0.0.1:${nfs.info.nfsPort}`);
    await demo(pve, nfs);
    console.log('\ndemo finished: every step above ran against real loop devices, mkfs, mounts and a real NFS server.');
    return 0;
  } catch (e) {
    console.error('demo failed:', e instanceof Error ? e.message : e);
    return 1;
  } finally {
    await stopAll();
    await nfs?.close();
    await pve.close();
    try {
      execFileSync('losetup', ['-a'], { encoding: 'utf8' });
    } catch {
      /* informational only */
    }
  }
}

main().then(
  (c) => process.exit(c),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
