// The NFS PVs whose directory is gone (a `pv-missing-dir` finding: the claim's data was removed
// outside the driver), checked once for both outputs of the day-2 findings: `pve-nfs-csi report`
// and the controller's findings metrics. One stat per NFS PV with a sub-directory; a PV whose
// directory cannot be checked is an `error` finding (its share did not answer), never "missing".
import type { V1PersistentVolume } from '../../k8s/index.js';
import type { NfsStores } from '../../nfs/controller/store/store.js';
import type { Finding } from './findings.js';
import { missingDirFindings } from './nfs-findings.js';
import { nfsPlaceOf } from './ownership.js';

export async function checkPvDirs(
  pvs: readonly V1PersistentVolume[],
  stores: NfsStores,
  signal: AbortSignal,
): Promise<Finding[]> {
  const missing = [];
  const errors: Finding[] = [];
  for (const pv of pvs) {
    const d = nfsPlaceOf(pv);
    if (!d || d === 'unknown' || d.subDir === '') continue;
    try {
      if (!(await stores.open(d.server, d.share).stat(d.subDir, { signal }))) missing.push({ pv, ...d });
    } catch (e) {
      errors.push({
        kind: 'error',
        where: `${d.server}:${d.share}`,
        what: `PV ${pv.metadata?.name}`,
        detail: `cannot check its directory: ${(e as Error).message}`,
      });
    }
  }
  return [...errors, ...missingDirFindings(missing)];
}
