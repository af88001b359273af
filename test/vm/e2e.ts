// The VM tier's end-to-end scenario, beyond csi-sanity: data written through a real mount
// survives unpublish/republish (into another SCSI slot), an online expansion grows the
// filesystem the guest kernel sees, and NFS archive-on-delete keeps the data and never gets
// stuck on a second delete of a same-named claim. Run by test/vm/tier.ts inside vm.sh.
import { GUEST_KUBELET_DIR } from './guest-paths.js';
import { GuestVolumes, type GuestVolume } from './guest-volumes.js';
import { guestShell, scenarioLog, type ScenarioDeps as Deps } from './scenario.js';
import { vmEnv } from './vm-env.js';
import { csiClient, type VolumeCapability } from '../helpers/csi-client.js';
import { present } from '../helpers/present.js';

const GiB = 2 ** 30;
const NODE = 'talos-worker-1';
const { say, check, restart } = scenarioLog('e2e');
const sh = guestShell(60_000);

async function proxmox(deps: Deps): Promise<void> {
  const ctrl = await deps.startController('proxmox', deps.freshDir('vm-e2e-proxmox'));
  const c = csiClient(ctrl.endpoint, 120_000);
  const n = csiClient(vmEnv('VM_PROXMOX_ENDPOINT'), 120_000);
  const cap: VolumeCapability = { mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  const staging = `${GUEST_KUBELET_DIR}/e2e/pve-staging`;
  const target = `${GUEST_KUBELET_DIR}/e2e/pve-target`;
  const vols = new GuestVolumes({
    c,
    n,
    nodeId: NODE,
    cap,
    staging,
    target,
    parameters: { storage: 'local-lvm', ssd: 'true', backup: 'true' },
    say,
  });
  const create = (name: string) => vols.create(name);
  const publish = (v: GuestVolume) => vols.publish(v);
  const mount = (v: GuestVolume, pc: Record<string, string>) => vols.mount(v, pc);
  const unmount = (v: GuestVolume) => vols.unmount(v);
  const unpublish = (v: GuestVolume) => vols.unpublish(v);
  try {
    await sh(`mkdir -p ${staging}`);
    const a = await create('pvc-e2e-data');
    const pc1 = await publish(a);
    say(`published ${a.volumeId} at lun ${pc1.lun} (${pc1.DevicePath})`);
    await mount(a, pc1);
    await sh(`echo "survives republish" > ${target}/data.txt && sync`);
    check(
      (await sh(`cat ${target}/data.txt`)) === 'survives republish',
      'data written through the real mount in the guest',
    );
    await unmount(a);
    await unpublish(a);
    check(
      !(await sh(
        `grep -l naa.${present(pc1.DevicePath, 'DevicePath').split('0x')[1]} /sys/bus/scsi/devices/*/wwid 2>/dev/null || true`,
      )),
      'the disk left the guest after unpublish',
    );

    // Another volume takes the freed slot, so the data volume comes back in a different one.
    const b = await create('pvc-e2e-other');
    const pcb = await publish(b);
    const pc2 = await publish(a);
    check(pc2.lun !== pc1.lun, `republished into another slot (lun ${pc1.lun} → ${pc2.lun}; lun ${pcb.lun} is taken)`);
    await mount(a, pc2);
    check(
      (await sh(`cat ${target}/data.txt`)) === 'survives republish',
      'data still there after republish, not reformatted',
    );

    const before = Number((await sh(`df -B1 --output=size ${target} | tail -1`)).trim());
    const exp = await c.controller.ControllerExpandVolume({
      volumeId: a.volumeId,
      capacityRange: { requiredBytes: 2 * GiB },
      volumeCapability: cap,
    });
    check(
      Number(exp.capacityBytes) === 2 * GiB && exp.nodeExpansionRequired,
      'controller expanded online through the VM (QMP block_resize)',
    );
    await n.node.NodeExpandVolume({
      volumeId: a.volumeId,
      volumePath: target,
      stagingTargetPath: staging,
      capacityRange: { requiredBytes: 2 * GiB },
      volumeCapability: cap,
    });
    const after = Number((await sh(`df -B1 --output=size ${target} | tail -1`)).trim());
    check(
      after > before + 0.9 * GiB,
      `filesystem grew online in the guest: ${(before / GiB).toFixed(2)} → ${(after / GiB).toFixed(2)} GiB`,
    );
    check((await sh(`cat ${target}/data.txt`)) === 'survives republish', 'data intact after growing');
    await unmount(a);
  } finally {
    await vols.close();
    await ctrl.stop();
  }
}

async function nfs(deps: Deps): Promise<void> {
  const ctrl = await deps.startController('nfs', deps.freshDir('vm-e2e-nfs'));
  const c = csiClient(ctrl.endpoint, 120_000);
  const n = csiClient(vmEnv('VM_NFS_ENDPOINT'), 120_000);
  const cap: VolumeCapability = {
    mount: { mountFlags: ['soft', 'timeo=30', 'retrans=3'] },
    accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
  };
  const share = vmEnv('VM_NFS_SHARE');
  const params = {
    server: vmEnv('VM_NFS_SERVER'),
    share,
    subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
    onDelete: 'archive',
    'csi.storage.k8s.io/pvc/namespace': 'e2e',
    'csi.storage.k8s.io/pvc/name': 'claim',
    'csi.storage.k8s.io/pv/name': 'pvc-e2e-nfs',
  };
  const target = `${GUEST_KUBELET_DIR}/e2e/nfs-target`;
  try {
    const cycle = async (content: string) => {
      const v = present(
        (await c.controller.CreateVolume({ name: 'pvc-e2e-nfs', volumeCapabilities: [cap], parameters: params }))
          .volume,
        'CreateVolume: volume',
      );
      await n.node.NodePublishVolume({
        volumeId: v.volumeId,
        targetPath: target,
        volumeCapability: cap,
        volumeContext: v.volumeContext,
      });
      check(
        (await sh(`grep " ${target} " /proc/mounts | cut -d' ' -f3`)).startsWith('nfs'),
        `kernel NFS mount of ${v.volumeContext.server}:${v.volumeContext.share}/${v.volumeContext.subDir}`,
      );
      await sh(`echo "${content}" > ${target}/file.txt && sync`);
      await n.node.NodeUnpublishVolume({ volumeId: v.volumeId, targetPath: target });
      check((await sh(`test -e ${target} && echo present || echo gone`)) === 'gone', 'target unmounted and removed');
      await c.controller.DeleteVolume({ volumeId: v.volumeId });
    };
    await cycle('first claim');
    const archived = `${share}/archived-e2e`;
    check(
      (await sh(`cat ${archived}/claim/file.txt`)) === 'first claim',
      `onDelete archive kept the data in ${archived}/claim`,
    );
    await cycle('second claim');
    const entries = (await sh(`ls ${archived}`)).split(/\s+/).filter(Boolean);
    check(entries.length === 2, `a second delete of the same claim archived beside the first: ${entries.join(', ')}`);
    const second = present(
      entries.find((e) => e !== 'claim'),
      'the second archive',
    );
    check(
      (await sh(`cat ${archived}/${second}/file.txt`)) === 'second claim',
      'the second archive holds the second claim data',
    );
    check((await sh(`cat ${archived}/claim/file.txt`)) === 'first claim', 'the first archive is untouched');
  } finally {
    c.close();
    n.close();
    await ctrl.stop();
  }
}

export async function runE2e(deps: Deps): Promise<number> {
  restart();
  await proxmox(deps);
  await nfs(deps);
  say('end-to-end scenario passed');
  return 0;
}
