// Node id → Proxmox VM. Every form proxmox-csi-plugin v0.19.1's node plugin can register, so
// VolumeAttachments it recorded (their node id is fixed at attach time) still detach:
// - `<node name>/<vmid>`: upstream's NodeGetInfo when the VM's SMBIOS serial carries `i=<vmid>`
//   (Proxmox sets it for Talos/CAPMox images); upstream's controller trusts the VMID, so do we;
// - `<node name>`: no `i=` in the serial; = the VM name, or `<node name>.<domain>` (upstream
//   matches the name as a prefix, confirmed by the Node's SMBIOS uuid; we accept the one FQDN form);
// plus a provider id `proxmox://<region>/<vmid>` and the VM's SMBIOS uuid. The VM list is cached
// briefly and shared by concurrent callers; a miss re-reads it once, so a new or migrated VM
// is found at once.
import type { Logger } from 'pino';
import { CsiError, FailedPrecondition, isCsiError } from '../../../errors.js';
import type { ProxmoxReadApi, VmResource } from '../../api/api.js';
import { entriesFromValues, smbiosUuid } from './drives.js';
import { TtlRead } from './ttl-read.js';

export interface VmRef {
  vmid: number;
  node: string;
  name: string;
}

export interface LocatorOptions {
  /** Cluster (region) name. */
  cluster: string;
  ttlMs?: number;
  now?: () => number;
  /** Where a VM config that cannot be read during a uuid scan is reported. */
  log?: Logger;
}

const PROVIDER_RE = /^proxmox:\/\/([^/]*)\/(\d+)$/;
/** upstream pkg/utils/node ParseNodeID: `<name>/<vmid>` */
const NAME_VMID_RE = /^([^/]+)\/(\d+)$/;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class VmLocator {
  private readonly vms: TtlRead<VmResource[]>;
  private readonly uuids = new Map<string, number>();
  private readonly ttlMs: number;
  private readonly now: () => number;

  constructor(
    private readonly api: ProxmoxReadApi,
    private readonly o: LocatorOptions,
  ) {
    this.ttlMs = o.ttlMs ?? 5_000;
    this.now = o.now ?? Date.now;
    this.vms = new TtlRead(
      `Proxmox ${o.cluster}: list VMs`,
      async (signal) => (await api.vmResources({ signal })).filter((v) => v.type === 'qemu' && !v.template),
      this.ttlMs,
      this.now,
    );
  }

  /** QEMU VMs of the cluster (templates excluded). */
  list(signal?: AbortSignal, fresh = false): Promise<VmResource[]> {
    return this.vms.get(signal, fresh);
  }

  invalidate(): void {
    this.vms.invalidate();
  }

  /** The VM for a node id, or undefined when there is none. */
  async resolve(nodeId: string, signal?: AbortSignal): Promise<VmRef | undefined> {
    const provider = PROVIDER_RE.exec(nodeId);
    if (provider) {
      if (provider[1] !== '' && provider[1] !== this.o.cluster) return undefined;
      const vmid = Number(provider[2]);
      return this.find((vms) => vms.filter((v) => v.vmid === vmid), nodeId, signal);
    }
    const nameVmid = NAME_VMID_RE.exec(nodeId);
    if (nameVmid) {
      const vmid = Number(nameVmid[2]);
      return this.find((vms) => vms.filter((v) => v.vmid === vmid), nodeId, signal);
    }
    const byName = await this.find(
      (vms) => {
        const exact = vms.filter((v) => v.name === nodeId);
        return exact.length > 0 ? exact : vms.filter((v) => v.name.startsWith(`${nodeId}.`));
      },
      nodeId,
      signal,
    );
    if (byName || !UUID_RE.test(nodeId)) return byName;
    return this.byUuid(nodeId.toLowerCase(), signal);
  }

  /** The VM with this VMID now (after a config read found it gone from its node). */
  async byVmid(vmid: number, signal?: AbortSignal): Promise<VmRef | undefined> {
    return this.find((vms) => vms.filter((v) => v.vmid === vmid), String(vmid), signal, true);
  }

  private async find(
    pick: (vms: VmResource[]) => VmResource[],
    what: string,
    signal?: AbortSignal,
    fresh = false,
  ): Promise<VmRef | undefined> {
    let hits = pick(await this.list(signal, fresh));
    if (hits.length === 0 && !fresh) hits = pick(await this.list(signal, true));
    if (hits.length > 1) {
      throw new FailedPrecondition(
        `node id ${what} matches several VMs in Proxmox cluster ${this.o.cluster} (${hits.map((v) => `${v.vmid} on ${v.node}`).join(', ')}); give the VMs unique names`,
      );
    }
    const v = hits[0];
    return v ? { vmid: v.vmid, node: v.node, name: v.name } : undefined;
  }

  private async byUuid(uuid: string, signal?: AbortSignal): Promise<VmRef | undefined> {
    const known = this.uuids.get(uuid);
    if (known !== undefined) {
      const vm = await this.byVmid(known, signal);
      if (vm) return vm;
      this.uuids.delete(uuid);
    }
    const vms = await this.list(signal, true);
    // A config that cannot be read (no VM.Audit on it, Proxmox busy) may be the one wanted: it
    // is logged, the scan goes on, and a miss then answers with that cause, not "no such VM".
    const unread: Array<{ vm: VmResource; err: unknown }> = [];
    for (const v of vms) {
      if ([...this.uuids.values()].includes(v.vmid)) continue;
      let cfg;
      try {
        cfg = await this.api.vmConfig(v.node, v.vmid, { signal });
      } catch (e) {
        if (signal?.aborted) throw e;
        if (isCsiError(e, 'NotFound')) continue; // deleted or migrated since the list: not a node any more
        this.o.log?.warn(
          { err: e, vmid: v.vmid, node: v.node, nodeId: uuid },
          'cannot read a VM config while looking for a node by SMBIOS uuid',
        );
        unread.push({ vm: v, err: e });
        continue;
      }
      const found = smbiosUuid(entriesFromValues(cfg.values));
      if (found) this.uuids.set(found, v.vmid);
      if (found === uuid) return { vmid: v.vmid, node: v.node, name: v.name };
    }
    const first = unread[0];
    if (!first) return undefined;
    const why = first.err instanceof Error ? first.err.message : String(first.err);
    const which = unread.map((u) => `${u.vm.vmid} on ${u.vm.node}`).join(', ');
    throw new CsiError(
      isCsiError(first.err) ? first.err.kind : 'Unavailable',
      `node id ${uuid}: no readable VM of Proxmox cluster ${this.o.cluster} has this SMBIOS uuid, and the config of ${unread.length} VM(s) could not be read (${which}): ${why}`,
      { cause: first.err },
    );
  }
}
