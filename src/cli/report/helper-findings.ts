// report's findings about the driver's helper VMs (helper-vms.ts judges each one): a CSI
// snapshot is listed for information; a copy VM older than any copy, a snapshot VM without its
// clone and a volume VM whose disk is gone are leftovers --fix removes through the ownership
// gate; a restored volume no PersistentVolume names is an orphaned disk under the same rules as
// the driver's own (findings.ts: the `gate` it passes in), freed by DeleteVolume. The metrics
// (src/metrics/findings-collect.ts) count the same findings.
import { useIndex } from '../../proxmox/controller/state/scan.js';
import { formatVolumeId } from '../../proxmox/volume-id.js';
import type { ClusterFacts } from './facts.js';
import type { Finding } from './finding.js';
import { judgeHelper } from './helper-vms.js';

export interface HelperRules {
  now: number;
  graceMs: number;
  /** Whether a PV of this region names storage:disk. */
  claimed: (storage: string, disk: string) => boolean;
  /**
   * Why an unclaimed disk made at `createdAt` may not be freed from this view (a foreign or
   * younger cluster view: findings.ts), or undefined.
   */
  viewProblem: (createdAt: number) => string | undefined;
}

export function helperFindings(f: ClusterFacts, r: HelperRules): Finding[] {
  const usesOf = useIndex(f.scan);
  const out: Finding[] = [];
  for (const h of f.helpers ?? []) {
    const where = `${f.region}/${h.vm.node}`;
    const what = `VM ${h.vm.vmid} (${h.vm.name})`;
    const age = r.now - h.record.created * 1000;
    const v = judgeHelper(h, r.now);
    switch (v.state) {
      case 'snapshot':
        out.push({
          kind: 'snapshot',
          where,
          what: v.clone.volid,
          detail: v.detail,
          sizeBytes: v.clone.size,
          ageMs: age,
        });
        break;
      case 'leftover':
        out.push({
          kind: 'helper-vm',
          where,
          what,
          detail: v.detail,
          ageMs: age,
          action: {
            type: 'remove-helper',
            region: f.region,
            node: h.vm.node,
            vmid: h.vm.vmid,
            created: h.record.created,
          },
        });
        break;
      case 'kept':
        out.push({ kind: 'helper-vm', where, what, detail: v.detail, ageMs: age, kept: v.kept });
        break;
      case 'volume': {
        const d = v.disk;
        if (r.claimed(d.storage, d.disk)) break;
        const finding: Finding = {
          kind: 'orphan-disk',
          where,
          what: d.volid,
          sizeBytes: d.size,
          detail: `${v.detail}, owned by its volume VM ${h.vm.vmid}; no PersistentVolume names it`,
          ...(d.createdAt !== undefined && { ageMs: r.now - d.createdAt }),
        };
        const use = usesOf(d.storage, d.disk);
        const refs = [...use.sites, ...use.unused, ...use.otherBus].map(
          (u) => `${'site' in u ? u.site.key : u.key} of VM ${u.vm.name} (${u.vm.vmid})`,
        );
        if (refs.length) finding.kept = `still referenced: ${refs.join('; ')}`;
        else if (d.createdAt === undefined)
          finding.kept = 'the storage reports no creation time, so an in-flight CreateVolume cannot be ruled out';
        else if (r.now - d.createdAt < r.graceMs)
          finding.kept = `younger than the grace period (${Math.round(r.graceMs / 1000)} s): may be a CreateVolume in flight`;
        else {
          const problem = r.viewProblem(d.createdAt);
          if (problem) finding.kept = problem;
          else
            finding.action = {
              type: 'delete-volume',
              region: f.region,
              volumeId: formatVolumeId({ region: f.region, zone: h.vm.node, storage: d.storage, disk: d.disk }),
            };
        }
        out.push(finding);
        break;
      }
    }
  }
  return out;
}
