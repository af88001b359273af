// One refresh of the findings metrics (findings.ts): the facts and findings exactly as
// `pve-nfs-csi report` gathers and judges them (readCluster + proxmoxFindings per Proxmox
// cluster, readNfs + nfsFindings for the NFS StorageClasses, checkPvDirs for the NFS PVs), through a Proxmox API that counts its calls,
// and the fences this controller holds. Loaded on the first refresh only: a controller without
// metrics never loads the report's code.
import type { Logger } from 'pino';
import { nfsClasses, readCluster, readNfs, slimKube, type KubeFacts, type NfsFacts } from '../cli/report/facts.js';
import { proxmoxFindings, type Finding } from '../cli/report/findings.js';
import { checkPvDirs } from '../cli/report/missing-dirs.js';
import { nfsJudgements } from '../cli/report/nfs-findings.js';
import { inSlices } from '../slices.js';
import type { ProxmoxInspect } from '../proxmox/controller/controller.js';
import type { NfsStores } from '../nfs/controller/store/store.js';
import type { GaugeSample } from '../csi/gauges.js';
import type { ProxmoxApi } from '../proxmox/api/api.js';
import { withoutWrites } from '../proxmox/api/read-only.js';
import { timeoutSignal } from '../timeout-signal.js';

/** A ProxmoxApi that counts its calls. */
function countingApi(api: ProxmoxApi, count: () => void): ProxmoxApi {
  return new Proxy(api, {
    get(target, key, receiver) {
      const v: unknown = Reflect.get(target, key, receiver);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        count();
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

export interface CollectInput {
  proxmox?: ProxmoxInspect | undefined;
  kube: (signal: AbortSignal) => Promise<KubeFacts>;
  stores?: NfsStores | undefined;
  log: Logger;
  graceMs?: number | undefined;
  now: number;
  count: () => void;
}

export interface Collected {
  findings: Finding[];
  /** The NFS facts; undefined without NFS stores. */
  nfs: NfsFacts | undefined;
  fences: GaugeSample[];
  /** False when a part could not be read (its findings are then an `error` finding). */
  complete: boolean;
}

/** Bound of one refresh: a backend that hangs ends it, the next refresh tries again. */
const REFRESH_TIMEOUT_MS = 120_000;

export async function collect(i: CollectInput): Promise<Collected> {
  const deadline = timeoutSignal(REFRESH_TIMEOUT_MS);
  try {
    return await collectUntil(i, deadline.signal);
  } finally {
    deadline.clear();
  }
}

async function collectUntil(i: CollectInput, signal: AbortSignal): Promise<Collected> {
  const k = await slimKube(await i.kube(signal));
  const rules = { controllerVmId: i.proxmox?.controllerVmId ?? 9999, graceMs: i.graceMs ?? 3_600_000, now: i.now };
  const findings: Finding[] = [];
  const fences: GaugeSample[] = [];
  for (const [region, c] of i.proxmox?.clusters ?? []) {
    try {
      const api = countingApi(withoutWrites(c.api), i.count);
      const facts = await readCluster(region, api, rules.controllerVmId, i.log, signal);
      findings.push(...proxmoxFindings(facts, k, rules));
    } catch (e) {
      findings.push({ kind: 'error', where: `proxmox/${region}`, what: 'cluster', detail: (e as Error).message });
    }
    const held = c.fences.list();
    const kinds = new Map<string, number>();
    for (const { fence } of held) kinds.set(fence.kind, (kinds.get(fence.kind) ?? 0) + 1);
    for (const [kind, n] of kinds) fences.push({ name: 'pve_csi_fences', labels: { region, kind }, value: n });
    const oldest = Math.max(0, ...held.map(({ fence }) => (i.now - fence.since) / 1000));
    fences.push({ name: 'pve_csi_fence_oldest_age_seconds', labels: { region }, value: oldest });
  }
  const nfs = i.stores ? await readNfs(nfsClasses(k.classes), k.pvs, i.stores, { signal, sizes: true }) : undefined;
  if (nfs && i.stores) {
    await inSlices(nfsJudgements(nfs, k, rules), (f) => f && findings.push(f));
    findings.push(...(await checkPvDirs(k.pvs, i.stores, signal)));
  }
  return { findings, nfs, fences, complete: !findings.some((f) => f.kind === 'error') };
}
