// ListVolumes (paged, stable tokens) and ControllerGetVolume, with the nodes each volume is
// published to and a condition that flags half-done attach/detach changes and leftovers.
import { Busy, InvalidArgument } from '../../../errors.js';
import { defined } from '../../../defined.js';
import { holdsImages, isAvailable } from '../state/cluster.js';
import { type ControllerHandler, type Core, foundVolume, requireVolume, topologyOf } from '../core.js';
import { isHelperSite } from '../state/drives.js';
import { ourVolumeVm } from '../safety/copy-vms.js';
import { type DiskUse, useIndex, usesOf } from '../state/scan.js';
import { isMarkerName } from '../params/mutable.js';
import { diskOwner, formatVolumeId, parseVolid } from '../../volume-id.js';

interface Listed {
  volumeId: string;
  region: string;
  zone: string;
  storage: string;
  disk: string;
  size: number;
  shared: boolean;
}

const TOKEN_PREFIX = 'v1.';

/** Tokens name the last volume id returned, so a page stays valid when volumes come or go. */
export const encodeToken = (lastVolumeId: string): string =>
  TOKEN_PREFIX + Buffer.from(lastVolumeId, 'utf8').toString('base64url');

export function decodeToken(token: string): string | undefined {
  if (!token.startsWith(TOKEN_PREFIX)) return undefined;
  const body = token.slice(TOKEN_PREFIX.length);
  if (!/^[A-Za-z0-9_-]+$/.test(body)) return undefined;
  const id = Buffer.from(body, 'base64url').toString('utf8');
  return encodeToken(id) === token ? id : undefined;
}

function statusOf(use: DiskUse): {
  publishedNodeIds: string[];
  volumeCondition: { abnormal: boolean; message: string };
} {
  const published = [
    ...new Set(use.sites.filter((s) => s.site.placement === 'attached' && !isHelperSite(s.site)).map((s) => s.vm.name)),
  ].sort();
  const problems: string[] = [];
  for (const s of use.sites) {
    if (isHelperSite(s.site))
      problems.push(
        `attached as ${s.site.key} of VM ${s.vm.name} (${s.vm.vmid}) for an offline expansion (removed by the next expansion, publish or delete if it was interrupted)`,
      );
    else if (s.site.placement !== 'attached')
      problems.push(
        `${s.site.placement} as ${s.site.key} of VM ${s.vm.name} (${s.vm.vmid}): a pending change Proxmox has not applied`,
      );
  }
  for (const u of use.unused) problems.push(`left over as ${u.key} of VM ${u.vm.name} (${u.vm.vmid})`);
  if (published.length > 1) problems.push(`attached to several VMs: ${published.join(', ')}`);
  return {
    publishedNodeIds: published,
    volumeCondition: problems.length
      ? { abnormal: true, message: problems.join('; ') }
      : { abnormal: false, message: 'disk present on its storage' },
  };
}

/**
 * Every volume with its uses. The first page reads everything now; a later page (a token of this
 * listing) reuses what was read within the cache TTL, so paging through 500 volumes costs one
 * listing, not one per page.
 */
async function listAll(
  core: Core,
  signal: AbortSignal,
  later = false,
): Promise<{ volumes: Listed[]; uses: Map<string, DiskUse> }> {
  const volumes: Listed[] = [];
  const uses = new Map<string, DiskUse>();
  for (const cluster of [...core.clusters.values()].sort((a, b) => a.region.localeCompare(b.region))) {
    const rows = (await cluster.storages(signal, !later)).filter((r) => holdsImages(r) && isAvailable(r));
    // A shared storage shows up once per node but holds one set of disks.
    const seenShared = new Set<string>();
    const wanted = rows.filter((r) => {
      if (!r.shared) return true;
      if (seenShared.has(r.storage)) return false;
      seenShared.add(r.storage);
      return true;
    });
    // Every disk of the storage, not only the controller VMID's: restored and cloned volumes
    // are owned by the driver's volume VMs (copy-vms.ts ourVolumeVm), and a volume missing here is one
    // csi-attacher's reconciliation takes for detached and attaches again.
    const [lists, scan] = await Promise.all([
      Promise.all(
        wanted.map(async (r) => ({
          r,
          items: await cluster.content.list(r.node, r.storage, undefined, signal, !later),
        })),
      ),
      cluster.index.scan({ signal, maxAgeMs: later ? cluster.ttlMs : 0 }),
    ]);
    const ours = (disk: string) =>
      diskOwner(disk) === core.controllerVmId
        ? !isMarkerName(disk)
        : ourVolumeVm(scan, disk, core.controllerVmId) !== undefined;
    const usesIn = useIndex(scan);
    for (const { r, items } of lists) {
      for (const item of items) {
        const vol = parseVolid(item.volid);
        if (!vol || vol.storage !== r.storage || !ours(vol.disk)) continue;
        const ref = { region: cluster.region, zone: r.shared ? '' : r.node, storage: r.storage, disk: vol.disk };
        const volumeId = formatVolumeId(ref);
        volumes.push({ volumeId, ...ref, size: item.size, shared: r.shared });
        uses.set(volumeId, usesIn(r.storage, vol.disk));
      }
    }
  }
  volumes.sort((a, b) => (a.volumeId < b.volumeId ? -1 : a.volumeId > b.volumeId ? 1 : 0));
  return { volumes, uses };
}

export const listVolumes: ControllerHandler<'listVolumes'> = async (core, req, ctx) => {
  const max = req.maxEntries;
  if (max < 0) throw new InvalidArgument('max_entries must not be negative');
  let after: string | undefined;
  if (req.startingToken) {
    after = decodeToken(req.startingToken);
    if (after === undefined)
      throw new Busy(`starting_token "${req.startingToken}" was not issued by this driver; list again from the start`);
  }
  const { volumes, uses } = await listAll(core, ctx.signal, after !== undefined);
  const rest = after === undefined ? volumes : volumes.filter((v) => v.volumeId > after);
  const page = max > 0 ? rest.slice(0, max) : rest;
  const more = max > 0 && rest.length > max;
  return {
    entries: page.map((v) => ({
      volume: {
        volumeId: v.volumeId,
        capacityBytes: String(v.size),
        accessibleTopology: [topologyOf(v.region, v.shared ? undefined : v.zone)],
      },
      status: statusOf(uses.get(v.volumeId) ?? { sites: [], unused: [], otherBus: [] }),
    })),
    nextToken: more ? encodeToken(defined(page.at(-1), 'the last entry of a full page').volumeId) : '',
  };
};

export const controllerGetVolume: ControllerHandler<'controllerGetVolume'> = async (core, req, ctx) => {
  const v = requireVolume(core, req.volumeId);
  const found = await foundVolume(v, req.volumeId, ctx.signal);
  const shared = (await v.cluster.storageRows(v.ref.storage, ctx.signal)).some((r) => r.shared);
  const scan = await v.cluster.index.scan({ signal: ctx.signal, nodes: shared ? undefined : [found.node] });
  return {
    volume: {
      volumeId: req.volumeId,
      capacityBytes: String(found.item.size),
      accessibleTopology: [topologyOf(v.ref.region, shared ? undefined : found.node)],
    },
    status: statusOf(usesOf(scan, v.ref.storage, v.ref.disk)),
  };
};
