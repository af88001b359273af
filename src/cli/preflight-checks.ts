// The checks of `pve-nfs-csi preflight`. Each yields named results; nothing here prints or
// exits. Proxmox: API, the credentials' privileges (GET /access/permissions), the storages the
// classes use. NFS: portmapper, export (MNT) and root write access from where this runs (the
// controller speaks NFS from the pod network; upstream mounted from the host network). Classes:
// the drivers' own parameter parsers. Swap: what changes for existing volumes.
import type { ProxmoxConfig } from '../config/types.js';
import {
  createNfs3Stores,
  lookupPort,
  MOUNT_PROGRAM,
  MOUNT_V3,
  NFS_CONTEXT,
  NFS_PROGRAM,
  NFS_V3,
  parseCreateParams,
  parseVolumeId,
} from '../nfs/index.js';
import {
  BASE_ROLE,
  createHttpProxmoxApi,
  CSI_ROLE_PRIVILEGES,
  kindOf,
  MOVE_ROLE,
  parseCreateParameters,
  SERVED_TYPES,
  SNAPSHOT_ROLE,
  type HttpProxmoxApi,
} from '../proxmox/index.js';
import {
  effectiveMissing,
  fixNeeds,
  missingMovePrivileges,
  missingNeeds,
  reportNeeds,
  snapshotNeeds,
  type Need,
} from './privileges.js';

export type Status = 'pass' | 'fail' | 'warn' | 'info' | 'skip';
export interface CheckResult {
  name: string;
  status: Status;
  message: string;
}

export interface StorageClassSpec {
  name: string;
  driver: 'proxmox' | 'nfs';
  parameters: Record<string, string>;
}

export interface PreflightInput {
  proxmox?: ProxmoxConfig | undefined;
  classes: StorageClassSpec[];
  /** What the new release does with NFS handles that record no onDelete. */
  defaultOnDelete: string;
  /** What the old csi-driver-nfs release did (its controller.defaultOnDeletePolicy), if known. */
  previousDefaultOnDelete?: string | undefined;
  /** Existing PersistentVolumes (`kubectl get pv -o json` items), if given. */
  pvs?:
    Array<{ metadata?: { name?: string }; spec?: { csi?: { driver?: string; volumeHandle?: string } } }> | undefined;
  nfsPort?: number | undefined;
  nfsMountPort?: number | undefined;
  timeoutMs: number;
}

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

export function checkStorageClasses(input: PreflightInput): CheckResult[] {
  return input.classes.map((c) => {
    const name = `storageclass/${c.name}`;
    try {
      if (c.driver === 'proxmox') parseCreateParameters(c.parameters);
      else {
        // the provisioner adds these; a template in subDir needs them
        parseCreateParams(
          'pv-preflight',
          {
            ...c.parameters,
            [NFS_CONTEXT.pvcNamespace]: 'ns',
            [NFS_CONTEXT.pvcName]: 'claim',
            [NFS_CONTEXT.pvName]: 'pv-preflight',
          },
          'delete',
        );
      }
      return {
        name,
        status: 'pass',
        message: `parameters accepted by ${c.driver === 'proxmox' ? 'csi.proxmox.sinextra.dev' : 'nfs.csi.k8s.io'}`,
      };
    } catch (e) {
      return { name, status: 'fail', message: errText(e) };
    }
  });
}

/** A privilege counts when granted on `/` or on the subtree it is checked on. */
function missingPrivileges(perms: Record<string, Record<string, number>>): string[] {
  const on = (path: string, priv: string) => Boolean(perms['/']?.[priv] || perms[path]?.[priv]);
  return BASE_ROLE.privileges.filter((p) => !on(p.startsWith('VM.') ? '/vms' : '/storage', p));
}

export async function checkProxmox(input: PreflightInput, signal: AbortSignal): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  const cfg = input.proxmox;
  const storages = [
    ...new Set(
      input.classes
        .filter((c) => c.driver === 'proxmox')
        .map((c) => c.parameters.storage)
        .filter(Boolean),
    ),
  ] as string[];
  if (!cfg) {
    if (storages.length)
      out.push({
        name: 'proxmox/config',
        status: 'fail',
        message: 'Proxmox StorageClasses are configured but no config.yaml was given (--config)',
      });
    return out;
  }
  for (const w of cfg.warnings ?? []) out.push({ name: 'proxmox/config', status: 'warn', message: w });
  for (const cluster of cfg.clusters) {
    const base = `proxmox/${cluster.region}`;
    let api: HttpProxmoxApi;
    try {
      api = createHttpProxmoxApi({ cluster, queryTimeoutMs: input.timeoutMs });
    } catch (e) {
      out.push({ name: `${base}/api`, status: 'fail', message: errText(e) });
      continue;
    }
    try {
      const who = cluster.username ? `user ${cluster.username} (ticket login)` : `token ${cluster.tokenId}`;
      try {
        const v = await api.version({ signal });
        out.push({
          name: `${base}/api`,
          status: 'pass',
          message: `${cluster.url} answers as ${who}: Proxmox VE ${v.version}`,
        });
      } catch (e) {
        out.push({ name: `${base}/api`, status: 'fail', message: errText(e) });
        continue;
      }
      try {
        const perms = await api.permissions({ signal });
        const missing = missingPrivileges(perms);
        out.push(
          missing.length === 0
            ? { name: `${base}/privileges`, status: 'pass', message: `${who} has ${CSI_ROLE_PRIVILEGES}` }
            : {
                name: `${base}/privileges`,
                status: 'fail',
                message: `${who} lacks ${missing.join(', ')}; grant it a role with ${CSI_ROLE_PRIVILEGES} on /vms and /storage (docs/proxmox-setup.md)`,
              },
        );
        // not needed to serve CSI: only `pve-nfs-csi move` (docs/day2.md) creates and migrates a helper VM
        const moveMissing = [
          ...new Set(
            (storages.length ? storages : ['local-lvm']).flatMap((s) =>
              missingMovePrivileges(perms, cfg.controllerVmId, s),
            ),
          ),
        ];
        out.push({
          name: `${base}/move-privileges`,
          status: 'info',
          message:
            moveMissing.length === 0
              ? `${who} may run pve-nfs-csi move (helper VM ${cfg.controllerVmId}: ${MOVE_ROLE.privileges.join(', ')})`
              : `pve-nfs-csi move (optional) would need ${moveMissing.join('; ')}`,
        });
        // snapshots, restores and clones (docs/snapshots.md): CreateSnapshot is refused without them
        const snapMissing = missingNeeds(perms, snapshotNeeds(cfg.controllerVmId));
        out.push({
          name: `${base}/snapshot-privileges`,
          status: 'info',
          message:
            snapMissing.length === 0
              ? `${who} may make snapshots, restores and clones (${SNAPSHOT_ROLE.privileges.join(', ')})`
              : `snapshots, restores and clones (optional) would need ${snapMissing.map((n) => `${n.privilege} on ${n.path} (${n.why})`).join('; ')}`,
        });
        // nor for `pve-nfs-csi report` (read) and `report --fix` (free disks, drop config entries)
        const reportMissing = effectiveMissing(perms, reportNeeds(cfg.controllerVmId), storages);
        const fixMissing = effectiveMissing(perms, fixNeeds(cfg.controllerVmId), storages).filter(
          (n) => !reportMissing.some((m) => m.path === n.path && m.privilege === n.privilege),
        );
        const need = (ns: Need[]) => ns.map((n) => `${n.privilege} on ${n.path} (${n.why})`).join('; ');
        out.push({
          name: `${base}/report-privileges`,
          status: 'info',
          message:
            reportMissing.length === 0 && fixMissing.length === 0
              ? `${who} may run pve-nfs-csi report and report --fix`
              : `pve-nfs-csi report (optional) would need ${reportMissing.length ? need(reportMissing) : 'nothing more'}${fixMissing.length ? `; report --fix also ${need(fixMissing)}` : ''}`,
        });
      } catch (e) {
        out.push({ name: `${base}/privileges`, status: 'fail', message: errText(e) });
      }
      if (storages.length === 0) continue;
      try {
        const rows = await api.storageResources({ signal });
        for (const id of storages) {
          const on = rows.filter((r) => r.storage === id);
          const name = `${base}/storage/${id}`;
          // The type named is the odd one's, not the first row's.
          const odd = on.find((r) => !kindOf(r.plugintype));
          const noImages = on.filter((r) => !r.content.split(',').includes('images'));
          if (on.length === 0)
            out.push({
              name,
              status: 'fail',
              message: `no storage "${id}" in cluster ${cluster.region} (a StorageClass uses it)`,
            });
          else if (odd)
            out.push({
              name,
              status: 'fail',
              message: `storage "${id}" is ${odd.plugintype ?? '?'}, which the driver does not serve (served: ${SERVED_TYPES.join(', ')})`,
            });
          else if (noImages.length > 0)
            out.push({
              name,
              status: 'fail',
              message: `storage "${id}" does not hold disk images on ${noImages
                .map((r) => r.node)
                .sort()
                .join(
                  ', ',
                )} (content: ${noImages[0]?.content ?? ''}); add "images" to its content in Datacenter → Storage`,
            });
          else
            out.push({
              name,
              status: 'pass',
              message: `${on[0]?.plugintype ?? 'lvmthin'} (${kindOf(on[0]?.plugintype)?.name ?? ''}${on.some((r) => r.shared) ? ', shared' : ''}) on ${on
                .map((r) => r.node)
                .sort()
                .join(', ')}`,
            });
        }
      } catch (e) {
        out.push({ name: `${base}/storage`, status: 'fail', message: errText(e) });
      }
    } finally {
      await api.close();
    }
  }
  return out;
}

export async function checkNfs(input: PreflightInput, signal: AbortSignal): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  const targets = new Map<string, { server: string; share: string }>();
  for (const c of input.classes.filter((x) => x.driver === 'nfs')) {
    const p = Object.fromEntries(Object.entries(c.parameters).map(([k, v]) => [k.toLowerCase(), v]));
    if (p.server && p.share)
      targets.set(`${p.server}:${p.share}`, {
        server: p.server,
        share: p.share.startsWith('/') ? p.share : `/${p.share}`,
      });
  }
  if (targets.size === 0) return out;
  const fixed = input.nfsPort !== undefined || input.nfsMountPort !== undefined;
  for (const server of new Set([...targets.values()].map((t) => t.server))) {
    const name = `nfs/${server}/portmapper`;
    if (fixed) {
      out.push({
        name,
        status: 'skip',
        message: `fixed ports given (nfs ${input.nfsPort ?? 'portmapper'}, mount ${input.nfsMountPort ?? 'portmapper'}), as the driver would use them`,
      });
      continue;
    }
    try {
      const o = { host: server, timeoutMs: input.timeoutMs, privilegedPort: true };
      const mountd = await lookupPort(o, MOUNT_PROGRAM, MOUNT_V3, signal);
      const nfsd = await lookupPort(o, NFS_PROGRAM, NFS_V3, signal).catch(() => 2049);
      out.push({ name, status: 'pass', message: `portmapper answers: mountd v3 on ${mountd}, nfs v3 on ${nfsd}` });
    } catch (e) {
      out.push({
        name,
        status: 'fail',
        message: `${errText(e)} (the controller needs the portmapper, port 111, reachable from the pod network)`,
      });
    }
  }
  const stores = createNfs3Stores({
    timeoutMs: input.timeoutMs,
    nfsPort: input.nfsPort,
    mountPort: input.nfsMountPort,
    privilegedPort: true,
  });
  try {
    for (const { server, share } of targets.values()) {
      const base = `nfs/${server}:${share}`;
      const store = stores.open(server, share);
      try {
        const st = await store.stat('', { signal });
        if (!st) throw new Error(`${share} does not exist on ${server}`);
        out.push({ name: `${base}/export`, status: 'pass', message: 'exported to this client; MOUNT and NFS answer' });
      } catch (e) {
        out.push({ name: `${base}/export`, status: 'fail', message: errText(e) });
        continue;
      }
      const probe = `.pve-nfs-csi-preflight-${process.pid}-${Date.now()}`;
      try {
        await store.ensureDir(probe, { mode: 0o700, uid: 0, gid: 0 }, { signal });
        await store.removeTree(probe, { signal });
        out.push({
          name: `${base}/write`,
          status: 'pass',
          message: 'root can create, chown and remove directories (read-write, no root squash)',
        });
      } catch (e) {
        await store.removeTree(probe, { signal }).catch(() => undefined);
        out.push({ name: `${base}/write`, status: 'fail', message: errText(e) });
      }
    }
  } finally {
    await stores.close();
  }
  return out;
}

const done = (policy: string) => ({ delete: 'deleted', retain: 'retained', archive: 'archived' })[policy] ?? policy;

export function checkSwap(input: PreflightInput): CheckResult[] {
  const out: CheckResult[] = [];
  const effective = input.defaultOnDelete.toLowerCase();
  const previous = input.previousDefaultOnDelete?.toLowerCase();
  const legacy = (input.pvs ?? [])
    .filter((pv) => pv.spec?.csi?.driver === 'nfs.csi.k8s.io')
    .filter((pv) => {
      const ref = parseVolumeId(pv.spec?.csi?.volumeHandle ?? '');
      return ref !== null && ref.onDelete === undefined;
    })
    .map((pv) => pv.metadata?.name ?? '?');
  const name = 'swap/nfs-legacy-ondelete';
  const list =
    legacy.length > 10 ? `${legacy.slice(0, 10).join(', ')} and ${legacy.length - 10} more` : legacy.join(', ');
  if (!input.pvs) {
    out.push({
      name,
      status: 'warn',
      message: `NFS volumes whose handle records no onDelete will be ${done(effective)} on delete (controller.defaultOnDeletePolicy=${effective}); pass --pvs to list them and --previous-default-ondelete-policy to compare with the old release`,
    });
  } else if (legacy.length === 0) {
    out.push({ name, status: 'pass', message: 'no NFS PersistentVolume without onDelete in its handle' });
  } else if (previous !== undefined && previous !== effective) {
    out.push({
      name,
      status: 'fail',
      message: `${legacy.length} NFS PersistentVolume(s) without onDelete in their handle (${list}) were ${done(previous)} by csi-driver-nfs but would be ${done(effective)}: set controller.defaultOnDeletePolicy=${previous}`,
    });
  } else {
    out.push({
      name,
      status: previous ? 'pass' : 'warn',
      message: `${legacy.length} NFS PersistentVolume(s) without onDelete in their handle (${list}) will be ${done(effective)} on delete${previous ? ', as before' : "; make sure controller.defaultOnDeletePolicy equals the old release's"}`,
    });
  }
  out.push({
    name: 'swap/nfs-network',
    status: 'info',
    message:
      "the NFS controller now speaks NFS itself from the pod network (csi-driver-nfs mounted from the host network): the NAS must export to the pod network or the nodes' addresses it is masqueraded to",
  });
  if (input.proxmox?.clusters.some((c) => c.username)) {
    out.push({
      name: 'swap/proxmox-login',
      status: 'info',
      message: 'username/password clusters log in with tickets (renewed hourly); an API token is preferable',
    });
  }
  return out;
}

export const isCheckFailure = (r: CheckResult) => r.status === 'fail';
