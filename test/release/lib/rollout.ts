// The parts of a kubelet a controller Deployment's rollout needs in the k8s tier (there is no
// kubelet there): a new pod's containers are run here (env.runControllerPod) and the pod is
// reported Ready once its driver answers, so the Deployment controller counts it available and
// scales the old ReplicaSet down; a pod marked for deletion has its containers stopped with
// SIGTERM, as kubelet does, and is then removed (grace period 0, kubelet's last word). While it
// drives the rollout it samples what must not change: the leases' holders and the
// VolumeAttachments.
import type { Env } from '../../k8s/lib/env.js';
import { NS } from '../../k8s/lib/env.js';
import type { Deployment, Lease, Pod, VolumeAttachment } from '../../k8s/lib/objects.js';
import { present } from '../../helpers/present.js';

const now = () => new Date().toISOString();

async function markReady(env: Env, pod: Pod): Promise<void> {
  const at = now();
  const cond = (type: string) => ({ type, status: 'True', lastTransitionTime: at });
  await env.kube.patch(`/api/v1/namespaces/${NS}/pods/${pod.metadata.name}/status`, {
    status: {
      phase: 'Running',
      startTime: at,
      conditions: ['PodScheduled', 'Initialized', 'ContainersReady', 'Ready'].map(cond),
    },
  });
}

export interface RolloutSamples {
  /** Per lease, its holders in the order seen (consecutive repeats and empty holders dropped). */
  holders: Map<string, string[]>;
  /** VolumeAttachments seen detached or missing, with when. */
  detached: string[];
  samples: number;
}

export class ControllerKubelet {
  private readonly ready = new Set<string>();
  private readonly gone = new Set<string>();
  constructor(
    private readonly env: Env,
    private readonly deployment: string,
  ) {}

  private async pods(): Promise<Pod[]> {
    const d = await this.env.kube.get<Deployment>(`/apis/apps/v1/namespaces/${NS}/deployments/${this.deployment}`);
    const sel = Object.entries(present(d.spec.selector.matchLabels, 'the Deployment selector'))
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    return this.env.kube.list<Pod>(`/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent(sel)}`);
  }

  /** One pass: start new pods, report them Ready, finish the deletion of pods marked for it. */
  async step(): Promise<void> {
    for (const p of await this.pods()) {
      const name = p.metadata.name;
      const run = this.env.controllerPods.find((r) => r.name === name);
      if (p.metadata.deletionTimestamp) {
        if (run && !this.gone.has(name)) await run.stop('SIGTERM');
        this.gone.add(name);
        await this.env.kube.delete(`/api/v1/namespaces/${NS}/pods/${name}`, { gracePeriodSeconds: 0 });
        continue;
      }
      if (!run) await this.env.runControllerPod(p);
      if (!this.ready.has(name)) {
        await markReady(this.env, p);
        this.ready.add(name);
      }
    }
  }

  /** Names of the controller pods running now. */
  async running(): Promise<string[]> {
    return (await this.pods()).filter((p) => !p.metadata.deletionTimestamp).map((p) => p.metadata.name);
  }

  /**
   * Drives the rollout until the Deployment has its replicas all updated and available and no
   * old pod is left, then until every lease is held by a new pod; samples as it goes.
   */
  async rollout(attachments: string[], timeoutMs = 180_000): Promise<RolloutSamples> {
    const kube = this.env.kube;
    const holders = new Map<string, string[]>();
    const detached: string[] = [];
    let samples = 0;
    const end = Date.now() + timeoutMs;
    for (;;) {
      await this.step();
      samples++;
      for (const l of await kube.list<Lease>(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`)) {
        const seen = holders.get(l.metadata.name) ?? [];
        const h = l.spec.holderIdentity ?? '';
        if (h && seen.at(-1) !== h) seen.push(h);
        holders.set(l.metadata.name, seen);
      }
      for (const name of attachments) {
        const va = await kube.tryGet<VolumeAttachment>(`/apis/storage.k8s.io/v1/volumeattachments/${name}`);
        if (!va?.status?.attached) detached.push(`${now()} ${name}: ${va ? 'attached=false' : 'gone'}`);
      }
      const d = await kube.get<Deployment>(`/apis/apps/v1/namespaces/${NS}/deployments/${this.deployment}`);
      const want = d.spec.replicas ?? 1;
      const st = d.status ?? {};
      const pods = await this.running();
      const rolled =
        (st.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
        st.updatedReplicas === want &&
        st.availableReplicas === want &&
        st.replicas === want &&
        pods.length === want;
      // Every lease of a sidecar the running release has is held by a running pod. A release
      // without csi-snapshotter (a rollback to one from before snapshots) leaves the
      // snapshotters' leases to expire with the pod that held them: not this release's.
      const snapshotter = (d.spec.template.spec?.containers ?? []).some((c) => c.name.includes('snapshotter'));
      const ours = [...holders].filter(([name]) => snapshotter || !name.startsWith('external-snapshotter-'));
      const led = ours.every(([, hs]) => pods.some((p) => hs.at(-1)?.startsWith(p)));
      if (rolled && led && holders.size > 0) return { holders, detached, samples };
      if (Date.now() > end)
        throw new Error(
          `rollout of ${this.deployment} not done after ${timeoutMs / 1000} s: status ${JSON.stringify(st)}, pods ${pods.join(', ')}, lease holders ${JSON.stringify([...holders])}\n${this.env.sidecarErrors()}`,
        );
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}
