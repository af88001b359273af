// What the Proxmox node backend is built from, with the real adapters as defaults.
import type { Logger } from 'pino';
import type { HandlerOf } from '../../csi/bind.js';
import type { NodeBackend } from '../../csi/types.js';
import { createLinuxBlockDevices, type BlockDevices } from '../../os/blockdevices.js';
import { createLinuxCryptsetup, type Cryptsetup } from '../../os/cryptsetup.js';
import { createExec, type Exec } from '../../os/exec.js';
import { createLinuxMounter, type Mounter } from '../../os/mounter.js';
import { createStatFs, type StatFs } from '../../os/statfs.js';
import { KeyedLock } from '../../locks.js';
import type { NodeLabelSource } from './topology.js';
import { isPvcIdWwn, MAX_SLOT, MIN_SLOT } from '../contract.js';

/** The disks this driver attaches, for the OS adapter: the PVC-ID WWN scheme on scsi1..scsi30. */
export const PROXMOX_DISKS = { ownsWwn: isPvcIdWwn, minSlot: MIN_SLOT, maxSlot: MAX_SLOT } as const;

export interface ProxmoxNodeOptions {
  /** Kubernetes node name = Proxmox VM name. */
  nodeId: string;
  /** Topology outside Kubernetes, or when the Node lacks the labels. */
  region?: string | undefined;
  zone?: string | undefined;
  /**
   * At most this many of the driver's disks on this node (an operator keeping SCSI slots for
   * other disks); NodeGetInfo reports the smaller of it and the free slots. Undefined: the free slots.
   */
  maxVolumes?: number | undefined;
  /** Where `wwn-0x…` links are looked for when sysfs has no matching disk. Default /dev/disk/by-id. */
  deviceDir?: string | undefined;
  log: Logger;
  exec?: Exec | undefined;
  mounter?: Mounter | undefined;
  blockDevices?: BlockDevices | undefined;
  /** LUKS (encrypted volumes). */
  cryptsetup?: Cryptsetup | undefined;
  statFs?: StatFs | undefined;
  sysfsRoot?: string | undefined;
  devRoot?: string | undefined;
  /**
   * Reads the Node's labels. Undefined: use the in-cluster service account when there is one.
   * Null: never ask Kubernetes (flags only).
   */
  nodeLabels?: NodeLabelSource | null | undefined;
  /** How long stage/publish wait for a hot-plugged disk to appear. Default 15 s. */
  deviceWaitMs?: number | undefined;
  /** Bound for one umount of a local filesystem. Default 60 s. */
  unmountTimeoutMs?: number | undefined;
  /** Node calls act only on paths strictly inside this directory. Default /var/lib/kubelet. */
  kubeletDir?: string | undefined;
}

/** An RPC handler of the node backend, given the deps first (bound in node.ts). */
export type ProxmoxNodeHandler<K extends keyof NodeBackend> = HandlerOf<ProxmoxNodeDeps, NodeBackend, K>;

export interface ProxmoxNodeDeps {
  nodeId: string;
  region?: string | undefined;
  zone?: string | undefined;
  maxVolumes: number | undefined;
  deviceDir: string;
  sysfsRoot: string;
  log: Logger;
  mounter: Mounter;
  blockDevices: BlockDevices;
  cryptsetup: Cryptsetup;
  statFs: StatFs;
  nodeLabels: NodeLabelSource | null | undefined;
  deviceWaitMs: number;
  unmountTimeoutMs: number;
  locks: KeyedLock;
}

export function proxmoxNodeDeps(o: ProxmoxNodeOptions): ProxmoxNodeDeps {
  const exec = o.exec ?? createExec();
  const deviceDir = o.deviceDir ?? '/dev/disk/by-id';
  const sysfsRoot = o.sysfsRoot ?? '/sys';
  return {
    nodeId: o.nodeId,
    region: o.region,
    zone: o.zone,
    maxVolumes: o.maxVolumes,
    deviceDir,
    sysfsRoot,
    log: o.log,
    mounter: o.mounter ?? createLinuxMounter({ exec }),
    blockDevices:
      o.blockDevices ??
      createLinuxBlockDevices({
        exec,
        deviceDir,
        sysfsRoot,
        driverDisks: PROXMOX_DISKS,
        ...(o.devRoot ? { devRoot: o.devRoot } : {}),
      }),
    cryptsetup:
      o.cryptsetup ?? createLinuxCryptsetup({ exec, sysfsRoot, ...(o.devRoot ? { devRoot: o.devRoot } : {}) }),
    statFs: o.statFs ?? createStatFs(exec),
    nodeLabels: o.nodeLabels,
    deviceWaitMs: o.deviceWaitMs ?? 15_000,
    unmountTimeoutMs: o.unmountTimeoutMs ?? 60_000,
    locks: new KeyedLock(),
  };
}
