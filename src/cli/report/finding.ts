// What one finding of `report` (and of the findings metrics) is: its kind, where, what, and
// what --fix may do with it. Types only, apart from the rules that make findings (findings.ts),
// so every rule file can name a Finding without importing the others.
export type Kind =
  | 'orphan-disk'
  | 'attached-without-attachment'
  | 'pending-delete'
  | 'unused-entry'
  | 'helper-attachment'
  | 'pv-missing-disk'
  | 'orphan-dir'
  | 'pv-missing-dir'
  | 'retained-dir'
  | 'archive'
  /** A CSI snapshot of the Proxmox driver (its snapshot VM and clone): information. */
  | 'snapshot'
  /** A complete NFS snapshot (.snapshots/<name> with its completion record): information. */
  | 'nfs-snapshot'
  /** An NFS snapshot copy without its completion record: a CreateSnapshot that did not finish. */
  | 'partial-snapshot'
  /** A csi-driver-nfs snapshot archive (<share>/<name>/<src>.tar.gz or .tar): information, restorable. */
  | 'upstream-snapshot'
  /** A restore record (.snapshots/.restore-<claim>) no running restore may need: a restore that died. */
  | 'restore-marker'
  /** A copy, snapshot or volume VM of the driver that is not what a finished call leaves. */
  | 'helper-vm'
  | 'error';

export type Action =
  | { type: 'delete-volume'; region: string; volumeId: string }
  | { type: 'free-marker'; region: string; node: string; storage: string; volid: string; shared?: boolean }
  | {
      type: 'drop-unused';
      region: string;
      vm: { vmid: number; node: string; name: string };
      storage: string;
      disk: string;
    }
  | { type: 'unlink-helpers'; region: string; volumeId: string }
  /** A leftover helper VM of a thin copy (helper-vms.ts); `created`: its record's, re-checked. */
  | { type: 'remove-helper'; region: string; node: string; vmid: number; created: number }
  | { type: 'remove-dir'; server: string; share: string; path: string }
  /** A partial NFS snapshot (.snapshots/<entry>); `changedAt`: the judged latest change, re-checked. */
  | { type: 'remove-partial-snapshot'; server: string; share: string; dir: string; changedAt: number }
  /** A restore record (.snapshots/.restore-<claim>) whose claim is gone; `changedAt`: the judged one, re-checked. */
  | { type: 'remove-restore-marker'; server: string; share: string; marker: string; changedAt: number };

export interface Finding {
  kind: Kind;
  /** Where: region/node, region/VM, server:share. */
  where: string;
  /** What: a volid, a config key, a path, a PV. */
  what: string;
  detail: string;
  ageMs?: number;
  sizeBytes?: number;
  /** What --fix --yes would do; absent when nothing may be done. */
  action?: Action;
  /** Why --fix leaves it, when it is a leftover kind. */
  kept?: string;
  /** After a fix run: done, or the error. */
  result?: string;
}
