// Where a volume is already published on this node, read from the mount table rather than
// remembered, so the answer survives a plugin restart: bind mounts of the staged filesystem
// (same device number and subtree as the staging mount), or of the raw block device node.
import path from 'node:path';
import type { BlockDevices } from '../../os/blockdevices.js';
import type { MountEntry, Mounter } from '../../os/mounter.js';

/** Targets bound from the filesystem staged at `staged` (the staging mount itself excluded). */
export async function filesystemPublications(mounter: Mounter, staged: MountEntry): Promise<string[]> {
  const all = await mounter.list();
  return uniqueTargets(
    all.filter((m) => m.majMin === staged.majMin && m.fsroot === staged.fsroot && m.target !== staged.target),
  );
}

/**
 * Targets a block device node is bound onto. A bound device node shows up as a subtree of the
 * devtmpfs (`fsroot` /sdb for /dev/sdb), so entries are picked by that name and confirmed by
 * the device number of the target itself.
 */
export async function devicePublications(
  mounter: Mounter,
  blockDevices: BlockDevices,
  device: string,
  deviceMajMin: string,
): Promise<string[]> {
  const name = path.basename(device);
  const candidates = (await mounter.list()).filter((m) => m.fsroot !== '/' && path.basename(m.fsroot) === name);
  const hits: MountEntry[] = [];
  for (const m of candidates) {
    const majMin = await blockDevices.majMinOf(m.target).catch(() => undefined);
    if (majMin === deviceMajMin) hits.push(m);
  }
  return uniqueTargets(hits);
}

const uniqueTargets = (entries: readonly MountEntry[]): string[] => [...new Set(entries.map((m) => m.target))].sort();
