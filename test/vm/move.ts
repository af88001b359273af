// VM tier: the data path of `pve-nfs-csi move`. The guest first plays talos-worker-1 (VMID 111 on
// hyper1): a volume is published to it, formatted and mounted by the node plugin, and a file is
// written through the guest's kernel. Then the Proxmox half of move (src/proxmox/mover-vm.ts:
// helper VM 9999 holds the disk, is migrated offline to hyper2, lets go of it) carries the disk to
// hyper2 — the simulator's migration copies the volume's backing file, the bytes QEMU wrote for
// the guest. Then the guest plays talos-worker-2 (VMID 112 on hyper2, the same QEMU through the
// same QMP socket): the volume, now under its hyper2 handle, is published there, staged without
// being reformatted, and the file reads back the same. The Kubernetes half (PV/PVC swap, crashes)
// is tested against a real API server in test/k8s/cli/move.test.ts.
// Run by test/vm/tier.ts inside vm.sh.
import fs from 'node:fs';
import path from 'node:path';
import { GUEST_KUBELET_DIR } from './guest-paths.js';
import { guestShell, scenarioLog, type ScenarioDeps as Deps } from './scenario.js';
import { vmEnv } from './vm-env.js';
import { csiClient, type VolumeCapability } from '../helpers/csi-client.js';
import { present } from '../helpers/present.js';
import { stageAndPublish, unpublishAndUnstage } from '../helpers/stage-publish.js';
import { createHttpProxmoxApi } from '../../src/proxmox/api/http-api.js';
import { MoverVm } from '../../src/proxmox/mover-vm.js';
import { parseVolumeId, formatVolumeId } from '../../src/proxmox/volume-id.js';

const GiB = 2 ** 30;
const { say, check, restart } = scenarioLog('move');
const sh = guestShell(180_000);

export async function runMove(deps: Deps): Promise<number> {
  restart();
  const runDir = deps.freshDir('vm-move');
  // the same guest is VM 111 (hyper1) and VM 112 (hyper2): one QEMU, one QMP socket
  const ctrl = await deps.startController('proxmox', runDir, { alsoPlays: [112] });
  const c = csiClient(ctrl.endpoint, 300_000);
  const n = csiClient(vmEnv('VM_PROXMOX_ENDPOINT'), 300_000);
  const cap: VolumeCapability = { mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  const staging = `${GUEST_KUBELET_DIR}/move/staging`;
  const target = `${GUEST_KUBELET_DIR}/move/target`;
  const cfgText = fs.readFileSync(path.join(runDir, 'proxmox-config.yaml'), 'utf8');
  const url = /url: (\S+)/.exec(cfgText)?.[1] ?? '';
  const caFile = /ca_file: (\S+)/.exec(cfgText)?.[1] ?? '';
  // root's ticket login (sim/default-cluster.yaml): the VM tier is about the bytes; the
  // privileges move needs are checked in the k8s tier
  const api = createHttpProxmoxApi({
    cluster: { url, insecure: false, username: 'root@pam', password: 'root-login-password', region: 'homelab', caFile },
  });
  let volumeId: string | undefined;
  let publishedTo: string | undefined;
  let mounted = false as boolean;
  try {
    await sh(`mkdir -p ${staging}`);
    const v = present(
      (
        await c.controller.CreateVolume({
          name: 'pvc-move-data',
          capacityRange: { requiredBytes: GiB },
          volumeCapabilities: [cap],
          parameters: { storage: 'local-lvm' },
          accessibilityRequirements: {
            requisite: [
              { segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } },
            ],
          },
        })
      ).volume,
      'CreateVolume: volume',
    );
    volumeId = v.volumeId;
    check(parseVolumeId(volumeId)?.zone === 'hyper1', `created ${volumeId} on hyper1`);

    const mountOn = async (node: string, id: string) => {
      const r = await c.controller.ControllerPublishVolume({
        volumeId: id,
        nodeId: node,
        volumeCapability: cap,
        volumeContext: v.volumeContext,
      });
      publishedTo = node;
      await stageAndPublish(n, {
        volumeId: id,
        publishContext: r.publishContext,
        stagingTargetPath: staging,
        targetPath: target,
        volumeCapability: cap,
        volumeContext: v.volumeContext,
      });
      mounted = true;
    };
    const unmountFrom = async (node: string, id: string) => {
      await unpublishAndUnstage(n, { volumeId: id, targetPath: target, stagingTargetPath: staging });
      mounted = false;
      await c.controller.ControllerUnpublishVolume({ volumeId: id, nodeId: node });
      publishedTo = undefined;
    };

    await mountOn('talos-worker-1', volumeId);
    const note = `written on talos-worker-1 at ${new Date().toISOString()}`;
    await sh(
      `echo '${note}' > ${target}/note.txt && dd if=/dev/urandom of=${target}/blob bs=1M count=8 status=none && sync`,
    );
    const blobSum = (await sh(`sha256sum ${target}/blob`)).split(' ')[0] ?? '';
    say(`wrote note.txt and an 8 MiB random blob (sha256 ${blobSum.slice(0, 16)}…) on talos-worker-1`);
    await unmountFrom('talos-worker-1', volumeId);

    const ref = parseVolumeId(volumeId);
    if (!ref) throw new Error(`${volumeId} is not a Proxmox handle`);
    const volid = `${ref.storage}:${ref.disk}`;
    const helper = new MoverVm({ api, cluster: 'homelab', vmid: 9999, log: say });
    await helper.hold('hyper1', volid);
    const upid = await helper.startMigration('hyper1', 'hyper2');
    const log = await helper.finishMigration(upid, 'hyper1');
    check(
      log.some((l) => l.includes(`volume '${volid}' is '${volid}' on the target`)),
      `Proxmox migrated ${volid} to hyper2 under the same name`,
    );
    await helper.release(volid);
    const onSource = (await api.listContent('hyper1', ref.storage, undefined)).some((x) => x.volid === volid);
    const onTarget = (await api.listContent('hyper2', ref.storage, undefined)).some((x) => x.volid === volid);
    check(!onSource && onTarget, 'the disk is on hyper2 only');
    check(!(await api.vmResources()).some((r) => r.vmid === 9999), 'the helper VM is gone');

    const moved = formatVolumeId({ ...ref, zone: 'hyper2' });
    await mountOn('talos-worker-2', moved);
    volumeId = moved;
    check(
      (await sh(`sha256sum ${target}/blob`)).split(' ')[0] === blobSum,
      'the 8 MiB blob reads back identical on talos-worker-2 (hyper2)',
    );
    check((await sh(`cat ${target}/note.txt`)) === note, 'note.txt reads back identical');
    await unmountFrom('talos-worker-2', moved);
    await c.controller.DeleteVolume({ volumeId: moved });
    volumeId = undefined;
    say('done');
    return 0;
  } finally {
    if (mounted && volumeId) {
      await n.node.NodeUnpublishVolume({ volumeId, targetPath: target }).catch(() => undefined);
      await n.node.NodeUnstageVolume({ volumeId, stagingTargetPath: staging }).catch(() => undefined);
    }
    if (publishedTo && volumeId)
      await c.controller.ControllerUnpublishVolume({ volumeId, nodeId: publishedTo }).catch(() => undefined);
    if (volumeId) await c.controller.DeleteVolume({ volumeId }).catch(() => undefined);
    await api.close();
    await ctrl.stop();
  }
}
