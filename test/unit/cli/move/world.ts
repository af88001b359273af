// One claim to move on fakes: the Proxmox cluster (fake-mover.ts), the API server (fake-kube.ts)
// and the deps of a run; what a finished move must leave; and the freezer that stops a run at
// a checkpoint for good (a kill -9 there).
import type { Test } from 'tap';
import type { MoveDeps } from '../../../../src/cli/move/start.js';
import { boundClaim, FakeKube, NS } from './fake-kube.js';
import { moverCluster } from './fake-mover.js';

export const CLAIM = 'data';
export const OLD_PV = 'pvc-1';
export const DISK = `vm-9999-${OLD_PV}`;

export function world() {
  const api = moverCluster(OLD_PV);
  const kube = new FakeKube();
  boundClaim(kube, CLAIM, OLD_PV);
  const logs: string[] = [];
  const deps = (extra: Partial<MoveDeps> = {}): MoveDeps => ({
    kube,
    api,
    region: 'homelab',
    vmid: 9999,
    log: (l) => logs.push(l),
    bindTimeoutMs: 5_000,
    ...extra,
  });
  const volumes = (node: string) =>
    [...api.storageOf(node, 'local-lvm').volumes.keys()].filter((d) => d.includes(OLD_PV));
  return { api, kube, logs, deps, volumes, req: { namespace: NS, name: CLAIM, toZone: 'hyper2' } };
}
export type World = ReturnType<typeof world>;

type Tt = Pick<Test, 'equal' | 'same' | 'notOk'>;

/** What holds after a finished move of the claim to `to`. */
export async function assertMoved(t: Tt, w: World, to = 'hyper2', from = 'hyper1'): Promise<void> {
  const pvc = await w.kube.getPvc(NS, CLAIM);
  t.equal(pvc?.status?.phase, 'Bound', 'the claim is bound');
  t.equal(pvc?.spec.volumeName, `${OLD_PV}-${to}`, 'to the replacement PV');
  t.equal(pvc?.metadata.labels?.app, 'sonarr', 'labels kept');
  t.equal(pvc?.metadata.annotations?.['example.com/keep'], 'me', 'annotations kept');
  const pv = await w.kube.getPv(`${OLD_PV}-${to}`);
  t.equal(pv?.spec.csi?.volumeHandle, `homelab/${to}/local-lvm/${DISK}`, 'the handle names the target host');
  t.equal(pv?.spec.persistentVolumeReclaimPolicy, 'Delete', 'reclaim policy restored');
  t.notOk(pv?.metadata.annotations?.['pve-nfs-csi.io/move'], 'no record left');
  t.equal(pv?.metadata.annotations?.['pve-nfs-csi.io/moved-from'], OLD_PV);
  t.notOk(await w.kube.getPv(OLD_PV), 'old PV gone');
  t.same(w.volumes(from), [], 'nothing left on the source host');
  t.same(w.volumes(to), [DISK], 'exactly the one disk on the target host');
  t.notOk(w.api.vms.has(9999), 'the mover VM is gone');
}

/** Stops the run at checkpoint `at` for good; `names` lists the checkpoints passed. */
export function freezer(at?: string) {
  let hit: (name: string) => void = () => undefined;
  const frozen = new Promise<string>((r) => (hit = r));
  const names: string[] = [];
  return {
    names,
    frozen,
    checkpoint: async (name: string) => {
      names.push(name);
      if (name === at) {
        hit(name);
        await new Promise(() => undefined);
      }
    },
  };
}
