// An in-memory Kubernetes API for `move`'s port (MoveKube), with the semantics the state machine
// relies on: JSON merge patches (null removes), resourceVersion and UID preconditions (409),
// names that are taken (409), deletion held by finalizers (pvc-protection, pv-protection) until
// they are removed, and the PV binder: a claim whose volumeName names a PV pre-bound to its UID
// becomes Bound (off: kube-controller-manager not running). Objects are copied in and out, as
// over the wire.
import type {
  MoveKube,
  PersistentVolume,
  PersistentVolumeClaim,
  Pod,
  VolumeAttachment,
} from '../../../../src/cli/move/kube-port.js';

const status = (code: number, message: string) => Object.assign(new Error(message), { status: code });
const copy = <T>(o: T): T => structuredClone(o);

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** RFC 7386 merge patch. */
function merge(target: Json, patch: Json): Json {
  const out = new Map(Object.entries(target));
  for (const [k, v] of Object.entries(patch)) {
    const cur = out.get(k);
    if (v === null) out.delete(k);
    else out.set(k, isObj(v) ? merge(isObj(cur) ? cur : {}, v) : v);
  }
  return Object.fromEntries(out);
}

type Deletable = { deleting?: boolean };

export class FakeKube implements MoveKube {
  readonly pvs = new Map<string, PersistentVolume & Deletable>();
  readonly pvcs = new Map<string, PersistentVolumeClaim & Deletable>();
  pods: Pod[] = [];
  attachments: VolumeAttachment[] = [];
  /** The PV controller binds pre-bound pairs. */
  binder = true;
  /** New claims carry kubernetes.io/pvc-protection (as the admission plugin adds it). */
  protection = false;
  /** Every write, e.g. `patchPv pvc-1`. */
  readonly writes: string[] = [];
  private seq = 0;

  private meta(): { uid: string; resourceVersion: string } {
    this.seq++;
    return { uid: `uid-${this.seq}`, resourceVersion: String(this.seq) };
  }

  /** The PV controller's pass: binds the pre-bound pairs (runs on every read and write). */
  bind(): void {
    if (!this.binder) return;
    for (const pvc of this.pvcs.values()) {
      const pv = pvc.spec.volumeName ? this.pvs.get(pvc.spec.volumeName) : undefined;
      if (!pv || pvc.status?.phase === 'Bound' || pv.spec.claimRef?.uid !== pvc.metadata.uid) continue;
      pvc.status = { ...pvc.status, phase: 'Bound' };
      pv.status = { phase: 'Bound' };
    }
  }

  addPv(pv: PersistentVolume): PersistentVolume {
    const full = copy(pv);
    full.metadata = { ...full.metadata, ...this.meta() };
    this.pvs.set(full.metadata.name, full);
    return copy(full);
  }

  addPvc(pvc: PersistentVolumeClaim): PersistentVolumeClaim {
    const full = copy(pvc);
    full.metadata = { ...full.metadata, ...this.meta() };
    this.pvcs.set(`${full.metadata.namespace}/${full.metadata.name}`, full);
    return copy(full);
  }

  async getPvc(namespace: string, name: string) {
    this.bind();
    const o = this.pvcs.get(`${namespace}/${name}`);
    return o && copy(o);
  }
  async getPv(name: string) {
    const o = this.pvs.get(name);
    return o && copy(o);
  }
  async listPvs() {
    return [...this.pvs.values()].map(copy);
  }
  async listVolumeAttachments() {
    return this.attachments.map(copy);
  }
  async listPods(namespace: string) {
    return this.pods.filter((p) => p.metadata.namespace === namespace).map(copy);
  }

  async patchPv(name: string, patch: unknown, resourceVersion?: string) {
    this.writes.push(`patchPv ${name}`);
    const pv = this.pvs.get(name);
    if (!pv) throw status(404, `persistentvolumes "${name}" not found`);
    if (resourceVersion !== undefined && resourceVersion !== pv.metadata.resourceVersion)
      throw status(409, `persistentvolumes "${name}": the object has been modified`);
    const next = merge(pv as unknown as Json, patch as Json) as unknown as PersistentVolume & Deletable;
    next.metadata.resourceVersion = this.meta().resourceVersion;
    if (next.deleting && !next.metadata.finalizers?.length) this.pvs.delete(name);
    else this.pvs.set(name, next);
    this.bind();
    return copy(next);
  }

  async patchPvc(namespace: string, name: string, patch: unknown) {
    this.writes.push(`patchPvc ${namespace}/${name}`);
    const key = `${namespace}/${name}`;
    const pvc = this.pvcs.get(key);
    if (!pvc) throw status(404, `persistentvolumeclaims "${name}" not found`);
    const next = merge(pvc as unknown as Json, patch as Json) as unknown as PersistentVolumeClaim & Deletable;
    next.metadata.resourceVersion = this.meta().resourceVersion;
    if (next.deleting && !next.metadata.finalizers?.length) this.pvcs.delete(key);
    else this.pvcs.set(key, next);
    this.bind();
    return copy(next);
  }

  async createPv(pv: PersistentVolume) {
    this.writes.push(`createPv ${pv.metadata.name}`);
    if (this.pvs.has(pv.metadata.name)) throw status(409, `persistentvolumes "${pv.metadata.name}" already exists`);
    const made = this.addPv(pv);
    this.bind();
    return made;
  }

  async createPvc(pvc: PersistentVolumeClaim) {
    const { namespace = '', name } = pvc.metadata;
    this.writes.push(`createPvc ${namespace}/${name}`);
    if (this.pvcs.has(`${namespace}/${name}`)) throw status(409, `persistentvolumeclaims "${name}" already exists`);
    const made = this.addPvc({
      ...pvc,
      metadata: { ...pvc.metadata, ...(this.protection && { finalizers: ['kubernetes.io/pvc-protection'] }) },
      status: { phase: 'Pending' },
    });
    this.bind();
    return (await this.getPvc(namespace, name)) ?? made;
  }

  async deletePv(name: string, uid: string) {
    this.writes.push(`deletePv ${name}`);
    const pv = this.pvs.get(name);
    if (!pv || pv.metadata.uid !== uid) return;
    if (pv.metadata.finalizers?.length) pv.deleting = true;
    else this.pvs.delete(name);
  }

  async deletePvc(namespace: string, name: string, uid: string) {
    this.writes.push(`deletePvc ${namespace}/${name}`);
    const key = `${namespace}/${name}`;
    const pvc = this.pvcs.get(key);
    if (!pvc || pvc.metadata.uid !== uid) return;
    if (pvc.metadata.finalizers?.length) pvc.deleting = true;
    else this.pvcs.delete(key);
  }
}

export const NS = 'apps';

/** A bound Proxmox claim `apps/<claim>` on PV `<pv>` in homelab/hyper1, made as a static PV is. */
export function boundClaim(kube: FakeKube, claim = 'data', pv = 'pvc-1', zone = 'hyper1'): void {
  kube.addPv({
    metadata: { name: pv, annotations: { 'pv.kubernetes.io/provisioned-by': 'csi.proxmox.sinextra.dev' } },
    spec: {
      capacity: { storage: '16Mi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Delete',
      storageClassName: 'proxmox-local',
      csi: {
        driver: 'csi.proxmox.sinextra.dev',
        volumeHandle: `homelab/${zone}/local-lvm/vm-9999-${pv}`,
        fsType: 'ext4',
      },
      nodeAffinity: {
        required: {
          nodeSelectorTerms: [
            {
              matchExpressions: [
                { key: 'topology.kubernetes.io/region', operator: 'In', values: ['homelab'] },
                { key: 'topology.kubernetes.io/zone', operator: 'In', values: [zone] },
              ],
            },
          ],
        },
      },
    },
  });
  const pvc = kube.addPvc({
    metadata: { name: claim, namespace: NS, labels: { app: 'sonarr' }, annotations: { 'example.com/keep': 'me' } },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '16Mi' } },
      storageClassName: 'proxmox-local',
      volumeName: pv,
    },
    status: { phase: 'Bound' },
  });
  const made = kube.pvs.get(pv);
  if (made) {
    made.spec.claimRef = { kind: 'PersistentVolumeClaim', namespace: NS, name: claim, uid: pvc.metadata.uid ?? '' };
    made.status = { phase: 'Bound' };
  }
}
