// The kubelet tier: the whole user path with a real kubelet. The control plane (with
// kube-scheduler) on the host, a real node in the QEMU guest (kubelet, containerd, runc, CNI),
// the chart's node DaemonSet as real containers there (registrar, privileged plugin,
// Bidirectional propagation), the controller on the host; claims of each seed class mounted
// into real pods that write, and read back after a new pod. Only the Proxmox API is simulated
// (it hot-plugs disks into the guest over QMP); NFS is the guest's kernel nfsd.
import t from 'tap';
import { present } from '../helpers/present.js';
import { Pve } from '../k8s/lib/workload.js';
import type { CSINode, Node, PersistentVolume, PersistentVolumeClaim, Pod } from '../k8s/lib/objects.js';
import { NFS_DRIVER, PROXMOX_DRIVER, REGION } from '../k8s/lib/env.js';
import { csiDrivers, startKubeletEnv, WORKER, type KubeletEnv } from './env.js';

const APPS = 'apps';
const started = Date.now();
const env: KubeletEnv = await startKubeletEnv((s) => t.comment(s));
const kube = env.kube;
const pve = new Pve(
  present(env.pve.info.url, 'the simulator URL'),
  present(env.pve.info.config, "the simulator's driver config"),
);
t.teardown(async () => {
  await pve.close();
  await env.stop(t.passing());
  t.comment(`kubelet tier: ${((Date.now() - started) / 1000).toFixed(0)} s in all`);
});
await kube.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: APPS } });
await kube.waitFor(`/api/v1/namespaces/${APPS}/serviceaccounts/default`, () => true, 'apps/default SA', 60_000);

const pvcPath = (n: string) => `/api/v1/namespaces/${APPS}/persistentvolumeclaims/${n}`;
const podPath = (n: string) => `/api/v1/namespaces/${APPS}/pods/${n}`;

/** The workload's JSON report (scripts/lib/kubelet-images.sh's workload) from a finished pod. */
interface Report {
  mode: string;
  ok: boolean;
  error?: string;
  sha256?: string;
  writer?: string;
  host: string;
}

function workloadPod(name: string, claim: string, args: string[]) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: APPS },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: 'workload',
          image: env.images.workload,
          imagePullPolicy: 'Never',
          args: [...args, '--dir', '/data'],
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
        },
      ],
      volumes: [{ name: 'data', persistentVolumeClaim: { claimName: claim } }],
    },
  };
}

/** Runs a workload pod to completion; its report from the termination message. */
async function runToEnd(name: string, claim: string, args: string[]): Promise<{ report: Report; runningMs: number }> {
  const t0 = Date.now();
  await kube.create(`/api/v1/namespaces/${APPS}/pods`, workloadPod(name, claim, args));
  const pod = await kube.waitFor<Pod>(
    podPath(name),
    (p) => p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed',
    `pod ${name} to finish`,
    600_000,
    () => events(name),
  );
  const term = present(pod.status?.containerStatuses?.[0]?.state?.terminated, `pod ${name}: terminated state`);
  const report = JSON.parse(present(term.message, `pod ${name}: termination message`)) as Report;
  if (pod.status?.phase !== 'Succeeded') throw new Error(`pod ${name} failed: ${JSON.stringify(report)}`);
  return { report, runningMs: Date.now() - t0 };
}

async function events(involved: string): Promise<string> {
  const list = await kube.list<{ involvedObject: { name?: string }; reason?: string; message?: string }>(
    `/api/v1/namespaces/${APPS}/events`,
  );
  return list
    .filter((e) => e.involvedObject.name === involved)
    .map((e) => `  ${e.reason ?? '?'}: ${e.message ?? ''}`)
    .join('\n');
}

async function deletePod(name: string): Promise<void> {
  await kube.delete(podPath(name));
  await kube.waitGone(podPath(name), `pod ${name} gone`, 300_000);
}

t.test('the node registered as the seed has it, and kubelet found both drivers', async (t) => {
  const node = await kube.get<Node>(`/api/v1/nodes/${WORKER.name}`);
  t.equal(node.metadata.labels?.['topology.kubernetes.io/region'], REGION);
  t.equal(node.metadata.labels?.['topology.kubernetes.io/zone'], WORKER.zone);
  const csiNode = await kube.get<CSINode>(`/apis/storage.k8s.io/v1/csinodes/${WORKER.name}`);
  const pv = present(
    csiDrivers(csiNode).find((d) => d.name === PROXMOX_DRIVER),
    'the Proxmox driver in CSINode',
  );
  t.equal(pv.nodeID, WORKER.name, 'node id from NodeGetInfo');
  t.ok(pv.topologyKeys?.includes('topology.kubernetes.io/zone'), `topology keys ${JSON.stringify(pv.topologyKeys)}`);
  t.ok((pv.allocatable?.count ?? 0) > 0, `volume limit from NodeGetInfo: ${pv.allocatable?.count}`);
  t.ok(
    csiDrivers(csiNode).some((d) => d.name === NFS_DRIVER),
    'the NFS driver in CSINode',
  );
  t.comment(
    `node Ready ${env.timings.nodeReadySeconds?.toFixed(1)} s after boot; CSINode at ${env.timings.csiNodeSeconds?.toFixed(1)} s`,
  );
});

for (const [cls, label] of [
  ['proxmox-local', 'proxmox'],
  ['syno-nfs-csi', 'nfs'],
] as const) {
  t.test(`${cls}: claim → pod writes → new pod reads back → claim deleted`, async (t) => {
    const claim = `data-${label}`;
    await kube.create(`/api/v1/namespaces/${APPS}/persistentvolumeclaims`, {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: { name: claim, namespace: APPS },
      spec: { accessModes: ['ReadWriteOnce'], storageClassName: cls, resources: { requests: { storage: '1Gi' } } },
    });
    const w = await runToEnd(`${label}-writer`, claim, ['write', '--seed', `seed-${label}`]);
    t.ok(w.report.ok, `writer report ${JSON.stringify(w.report)}`);
    t.comment(`${cls}: claim created → writer pod finished in ${(w.runningMs / 1000).toFixed(1)} s`);
    const pvc = await kube.get<PersistentVolumeClaim>(pvcPath(claim));
    const pvName = present(pvc.spec.volumeName, 'the bound PV');
    const pv = await kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${pvName}`);
    await deletePod(`${label}-writer`);

    const r = await runToEnd(`${label}-reader`, claim, ['verify']);
    t.ok(r.report.ok, `reader report ${JSON.stringify(r.report)}`);
    t.equal(r.report.sha256, w.report.sha256, 'the reader sees the bytes the writer wrote');
    await deletePod(`${label}-reader`);

    if (label === 'proxmox') {
      // Detached once no pod uses it: the VolumeAttachment goes, the disk leaves the VM.
      const vaGone = Date.now();
      await waitNoAttachment(pvName);
      t.comment(`proxmox-local: reader deleted → detached in ${((Date.now() - vaGone) / 1000).toFixed(1)} s`);
      const disk = present(pv.spec.csi?.volumeHandle.split('/').pop(), 'the disk of the PV');
      const cfg = await pve.vmConfig(WORKER.zone, WORKER.vmid);
      t.notOk(
        Object.values(cfg).some((v) => String(v).includes(disk)),
        `disk ${disk} not in VM ${WORKER.vmid}'s config after the detach`,
      );
    }
    await kube.delete(pvcPath(claim));
    await kube.waitGone(`/api/v1/persistentvolumes/${pvName}`, `PV ${pvName} gone`, 300_000);
    if (label === 'proxmox') {
      const disks = await pve.disks(WORKER.zone);
      t.notOk(
        [...disks.keys()].some((v) => v.includes(pvName)),
        `no disk of ${pvName} left on ${WORKER.zone}`,
      );
    } else {
      const tree = await env.node.guest.sh(
        `ls /srv/nas/volume1/k8s-volumes/talos/archived-${APPS} 2>&1; ls /srv/nas/volume1/k8s-volumes/talos/${APPS} 2>&1 || true`,
      );
      t.match(tree, new RegExp(`^${claim}$`, 'm'), `the directory was archived: ${tree}`);
    }
  });
}

async function waitNoAttachment(pvName: string): Promise<void> {
  const end = Date.now() + 300_000;
  for (;;) {
    const vas = await kube.list<{ spec: { source: { persistentVolumeName?: string } } }>(
      '/apis/storage.k8s.io/v1/volumeattachments',
    );
    if (!vas.some((v) => v.spec.source.persistentVolumeName === pvName)) return;
    if (Date.now() > end) throw new Error(`VolumeAttachment of ${pvName} still there after 300 s`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}
