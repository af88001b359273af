// VM tier: CSI inline (ephemeral) NFS volumes, the seed's reelsmith case. kubelet sends a
// NodePublishVolume with a generated volume id, the pod spec's volumeAttributes and
// csi.storage.k8s.io/ephemeral=true, and no controller call at all; the guest kernel mounts the
// folder from its nfsd. Nothing is created or removed on the server: the folder must exist, a
// missing one is NOT_FOUND and stays missing. Run by test/vm/tier.ts inside vm.sh.
import { guestExec } from './qga.js';
import { GUEST_KUBELET_DIR } from './guest-paths.js';
import { guestShell, scenarioLog } from './scenario.js';
import { csiClient, type VolumeCapability } from '../helpers/csi-client.js';
import { rejection } from '../helpers/rejection.js';
import { vmEnv } from './vm-env.js';

const { say, check, restart } = scenarioLog('inline-nfs');
const sh = guestShell(60_000);

/** Everything under the export, to prove the driver changed nothing there but the files we wrote. */
const tree = (share: string) => sh(`cd ${share} && find . | sort`);

export async function runInlineNfs(): Promise<number> {
  restart();
  const n = csiClient(vmEnv('VM_NFS_ENDPOINT'), 120_000);
  const share = vmEnv('VM_NFS_SHARE');
  const server = vmEnv('VM_NFS_SERVER');
  const pod = `${GUEST_KUBELET_DIR}/pods/8f1c2a4e-0000-4000-8000-reelsmith0001/volumes/kubernetes.io~csi`;
  const target = `${pod}/offsite-backups/mount`;
  const roTarget = `${pod}/media-ro/mount`;
  const volumeId = 'csi-3f9a6c1e5b7d2f4a8c0e6b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a';
  const cap: VolumeCapability = { mount: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  // The pod spec's volumeAttributes, plus what kubelet adds for an inline volume.
  const context = (subDir: string) => ({
    server,
    share,
    subDir,
    mountOptions: 'nfsvers=4.1,soft,timeo=30,retrans=3',
    'csi.storage.k8s.io/ephemeral': 'true',
    'csi.storage.k8s.io/pod.name': 'reelsmith-0',
    'csi.storage.k8s.io/pod.namespace': 'reelsmith',
    'csi.storage.k8s.io/pod.uid': '8f1c2a4e-0000-4000-8000-reelsmith0001',
    'csi.storage.k8s.io/serviceAccount.name': 'default',
  });
  const publish = (targetPath: string, subDir: string, readonly = false, id = volumeId) =>
    n.node.NodePublishVolume({
      volumeId: id,
      targetPath,
      volumeCapability: cap,
      readonly,
      volumeContext: context(subDir),
    });
  try {
    // The NAS folder exists beforehand, as for the seed's static PV.
    await sh(`mkdir -p ${share}/media/reelsmith && echo "on the NAS" > ${share}/media/reelsmith/existing.txt`);
    const before = await tree(share);

    await publish(target, 'media/reelsmith');
    const m = (await sh(`awk '$2 == "${target}" {print $1, $3, $4}' /proc/mounts`)).split(' ');
    check(
      m[0] === `${server}:${share}/media/reelsmith` && m[1] === 'nfs4' && /vers=4\.1/.test(m[2] ?? ''),
      `kernel NFS mount of the folder with the pod's mountOptions (${m.join(' ')})`,
    );
    check((await sh(`cat ${target}/existing.txt`)) === 'on the NAS', 'the pod sees the folder as it is on the NAS');
    await sh(`echo "from the pod" > ${target}/written.txt && sync`);
    await publish(target, 'media/reelsmith');
    check(
      (await sh(`grep -c " ${target} " /proc/mounts`)) === '1',
      'a repeated publish (kubelet retry) mounts nothing more',
    );

    await publish(roTarget, 'media', true, `${volumeId.slice(0, -1)}b`);
    const ro = await guestExec(vmEnv('VM_QGA_SOCKET'), ['/bin/sh', '-c', `echo x > ${roTarget}/nope.txt`]);
    check(
      ro.code !== 0 && /read-only/i.test(ro.stderr.toString()),
      'readOnly: true in the pod spec gives a read-only mount',
    );

    await n.node.NodeUnpublishVolume({ volumeId, targetPath: target });
    await n.node.NodeUnpublishVolume({ volumeId: `${volumeId.slice(0, -1)}b`, targetPath: roTarget });
    check(
      (await sh(`test -e ${target} || test -e ${roTarget} && echo left || echo gone`)) === 'gone',
      'unpublish unmounted and removed both targets',
    );
    await n.node.NodeUnpublishVolume({ volumeId, targetPath: target });
    check(true, 'a repeated unpublish is accepted');
    check((await sh(`cat ${share}/media/reelsmith/written.txt`)) === 'from the pod', 'the data stays on the server');
    const after = await tree(share);
    check(
      after === `${before}\n./media/reelsmith/written.txt`.split('\n').sort().join('\n'),
      'nothing on the export was created or removed by the driver',
    );

    const missing = await rejection(publish(`${pod}/missing/mount`, 'media/does-not-exist'));
    check(
      missing.code === 5,
      `a folder that does not exist is NOT_FOUND: "${(missing.details ?? missing.message).slice(0, 140)}"`,
    );
    check(
      (await sh(`test -e ${share}/media/does-not-exist && echo created || echo absent`)) === 'absent',
      'and the driver did not create it',
    );
    await n.node.NodeUnpublishVolume({ volumeId, targetPath: `${pod}/missing/mount` });
    say('inline NFS scenario passed');
    return 0;
  } finally {
    await sh(
      `umount ${target} ${roTarget} 2>/dev/null; rm -rf /var/lib/kubelet/pods/8f1c2a4e-0000-4000-8000-reelsmith0001 ${share}/media; true`,
    ).catch(() => undefined);
    n.close();
  }
}
