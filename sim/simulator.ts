// Wires config, state, backend, HTTPS API and admin endpoint together; close() undoes all of it.

import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type AdminServer, startAdminServer } from './admin.js';
import { accessRoutes } from './api/access.js';
import { clusterRoutes } from './api/cluster.js';
import { qemuRoutes } from './api/qemu.js';
import { qemuLifecycleRoutes } from './api/qemu-lifecycle.js';
import { qemuSnapshotRoutes } from './api/qemu-snapshot.js';
import { storageRoutes } from './api/storage.js';
import { taskRoutes } from './api/tasks.js';
import { type BackendKind, type Exec, createBackend } from './backend/index.js';
import { LoopHotplug } from './backend/loop.js';
import { buildCluster, loadSimConfig } from './config.js';
import { type Faults, FaultState, parseFaults } from './faults.js';
import { Router } from './http/router.js';
import type { ConnectionStats } from './http/keep-alive.js';
import { type ApiServer, startApiServer } from './http/server.js';
import { KeyedLocks, settleWithin } from './locks.js';
import { isDriveKey } from './model/drive.js';
import { configDigest } from './model/vmconfig.js';
import { type SimContext, vmRef } from './ops/context.js';
import { syncSilentDetach } from './ops/detach-fault.js';
import { backedDriveKeys } from './ops/vm-apply.js';
import { RequestLog } from './requestlog.js';
import { TaskRegistry } from './tasks.js';
import { generateTls } from './tls.js';
import { defined } from './defined.js';

export interface StartOptions {
  /** Path of a cluster YAML file, or the parsed object. Default: sim/default-cluster.yaml. */
  config?: string | object;
  /** Where certificates and sparse files go. Default: a new temp dir, removed by close(). */
  stateDir?: string;
  /** Disk backend: `none` (state only, default), `loop` (root), `qmp`. */
  backend?: BackendKind;
  /** Loop backend: links go to `<loopLinkDir>/<vm name>/wwn-0x…`. Default `<stateDir>/by-id`. */
  loopLinkDir?: string;
  /** qmp backend: VMID -> QMP unix socket path of the guest playing that VM. */
  qmp?: Record<number, string>;
  /** API port on 127.0.0.1; 0 = any free port (default). */
  port?: number;
  /** Admin port on 127.0.0.1; 0 = any free port (default). */
  adminPort?: number;
  /** Fault knobs merged over the config file's `faults:`. */
  faults?: Partial<Faults>;
  /** Ticket lifetime in seconds (PVE: 7200), over the config file's `ticketLifetimeSeconds`. */
  ticketLifetimeSeconds?: number;
  /** Host command runner (tests substitute a fake). */
  exec?: Exec;
}

export interface RunningSimulator {
  /** `https://127.0.0.1:PORT/api2/json` */
  url: string;
  host: string;
  port: number;
  caFile: string;
  tokenId: string;
  tokenSecret: string;
  /** The first password user of the config (ticket login), if it has one. */
  username?: string;
  password?: string;
  /** `http://127.0.0.1:PORT` */
  adminUrl: string;
  clusterName: string;
  nodes: string[];
  stateDir: string;
  loopLinkDir: string;
  backend: BackendKind;
  /** API connections opened and who closed them (the simulator closes idle ones as pveproxy does). */
  connections: ConnectionStats;
  close(): Promise<void>;
}

async function ensureDir(path: string): Promise<boolean> {
  if (existsSync(path)) return false;
  await mkdir(path, { recursive: true });
  return true;
}

export async function startSimulator(opts: StartOptions = {}): Promise<RunningSimulator> {
  const loaded = loadSimConfig(opts.config);
  const cfg = opts.ticketLifetimeSeconds ? { ...loaded, ticketLifetimeSec: opts.ticketLifetimeSeconds } : loaded;
  const faults = opts.faults ? parseFaults(opts.faults, 'faults option', cfg.faults) : cfg.faults;
  const kind: BackendKind = opts.backend ?? 'none';
  if (!['none', 'loop', 'qmp'].includes(kind)) throw new Error(`backend: expected none, loop or qmp, got '${kind}'`);
  if (kind === 'loop' && process.getuid?.() !== 0 && !opts.exec) {
    throw new Error('backend loop needs root (losetup); run as root or choose backend none');
  }

  const cleanups: Array<() => Promise<void>> = [];
  const runCleanups = async () => {
    const errors: string[] = [];
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch (e) {
        errors.push((e as Error).message);
      }
    }
    cleanups.length = 0;
    if (errors.length) throw new Error(`simulator cleanup: ${errors.join('; ')}`);
  };

  try {
    let stateDir: string;
    if (opts.stateDir) {
      stateDir = resolve(opts.stateDir);
      if (await ensureDir(stateDir)) cleanups.push(() => rm(stateDir, { recursive: true, force: true }));
    } else {
      stateDir = await mkdtemp(join(tmpdir(), 'pve-sim-'));
      cleanups.push(() => rm(stateDir, { recursive: true, force: true }));
    }
    const tlsDir = join(stateDir, 'tls');
    await mkdir(tlsDir, { recursive: true });
    cleanups.push(() => rm(tlsDir, { recursive: true, force: true }));
    cleanups.push(() => rm(join(stateDir, 'images'), { recursive: true, force: true }));
    const loopLinkDir = resolve(opts.loopLinkDir ?? join(stateDir, 'by-id'));
    if (kind === 'loop' && (await ensureDir(loopLinkDir))) {
      cleanups.push(() => rm(loopLinkDir, { recursive: true, force: true }));
    }

    const tls = await generateTls(
      tlsDir,
      cfg.nodes.map((n) => n.name),
    );
    const backend = createBackend({
      kind,
      stateDir,
      loopLinkDir,
      qmp: opts.qmp ?? {},
      ...(opts.exec ? { exec: opts.exec } : {}),
    });
    cleanups.push(() => backend.close());

    const faultState = new FaultState(faults);
    const locks = new KeyedLocks();
    const tasks = new TaskRegistry(faultState);
    const ctx: SimContext = {
      state: buildCluster(cfg, Math.floor(Date.now() / 1000)),
      locks,
      tasks,
      faults: faultState,
      backend,
      nowSec: () => Math.floor(Date.now() / 1000),
    };
    syncSilentDetach(ctx);
    const unplugAllAndWipe = async () => {
      for (const vm of ctx.state.vms.values()) {
        if (vm.status !== 'running') continue;
        for (const key of backedDriveKeys(ctx, vm)) {
          await backend.hotplug.unplug(vmRef(vm), key).catch(() => undefined);
        }
      }
      for (const node of ctx.state.nodes.values()) {
        for (const st of node.storages.values()) {
          for (const v of st.volumes.values()) if (v.filePath) await backend.files?.remove(v.filePath);
        }
      }
    };
    // cleanups run in reverse: servers stop, tasks drain, then devices and files go
    cleanups.push(unplugAllAndWipe);
    cleanups.push(async () => {
      locks.abortAll();
      await settleWithin(tasks.drain(), 3000);
    });

    const log = new RequestLog();
    const router = new Router().add(
      ...accessRoutes,
      ...clusterRoutes,
      ...storageRoutes,
      ...qemuRoutes,
      ...qemuLifecycleRoutes,
      ...qemuSnapshotRoutes,
      ...taskRoutes,
    );
    const api: ApiServer = await startApiServer({
      sim: ctx,
      router,
      log,
      cert: tls.cert,
      key: tls.key,
      port: opts.port ?? 0,
    });
    cleanups.push(() => api.close());

    const admin: AdminServer = await startAdminServer(
      {
        ctx,
        log,
        initialFaults: faults,
        stateDump: () => stateDump(ctx),
        reset: async () => {
          await settleWithin(tasks.drain(), 3000);
          await unplugAllAndWipe();
          ctx.state = buildCluster(cfg, Math.floor(Date.now() / 1000));
          tasks.clear();
          log.reset();
          faultState.set(faults);
          syncSilentDetach(ctx);
        },
      },
      opts.adminPort ?? 0,
    );
    cleanups.push(() => admin.close());

    const token = defined(cfg.tokens[0], 'the first API token of the cluster config');
    let closed: Promise<void> | undefined;
    return {
      url: `https://127.0.0.1:${api.port}/api2/json`,
      host: '127.0.0.1',
      port: api.port,
      caFile: tls.caFile,
      tokenId: token.id,
      tokenSecret: token.secret,
      ...(cfg.users[0] && { username: cfg.users[0].id, password: cfg.users[0].password }),
      adminUrl: `http://127.0.0.1:${admin.port}`,
      clusterName: cfg.cluster,
      nodes: cfg.nodes.map((n) => n.name),
      stateDir,
      loopLinkDir,
      backend: kind,
      connections: api.connections,
      close: () => (closed ??= runCleanups()),
    };
  } catch (e) {
    await runCleanups().catch(() => undefined);
    throw e;
  }
}

async function stateDump(ctx: SimContext): Promise<unknown> {
  const loop = ctx.backend.hotplug instanceof LoopHotplug ? ctx.backend.hotplug : undefined;
  return {
    cluster: ctx.state.name,
    backend: ctx.backend.kind,
    // Config and storage locks held at this moment (another writer, or a request in progress).
    locks: ctx.locks.heldKeys(),
    nodes: [...ctx.state.nodes.values()].map((n) => ({
      name: n.name,
      storages: [...n.storages.values()].map((s) => ({
        id: s.id,
        type: s.type,
        total: s.totalBytes,
        volumes: [...s.volumes.values()].map((v) => ({
          volid: `${s.id}:${v.volname}`,
          size: v.sizeBytes,
          owner: v.ownerVmid,
          file: v.filePath ?? null,
          // its snap_<volname>_<name> LVs (never in a storage listing) and their files
          snapshots: [...(v.snapshots ?? [])].map(([name, m]) => ({ name, file: m.filePath ?? null })),
        })),
      })),
    })),
    vms: [...ctx.state.vms.values()].map((vm) => ({
      vmid: vm.vmid,
      node: vm.node,
      name: vm.config.get('name') ?? null,
      status: vm.status,
      digest: configDigest(vm),
      config: Object.fromEntries(vm.config),
      pending: Object.fromEntries(vm.pending),
      pendingDelete: [...vm.pendingDelete].map(([k, force]) => (force ? `!${k}` : k)),
      snapshots: Object.fromEntries([...vm.snapshots].map(([n, keys]) => [n, Object.fromEntries(keys)])),
      loopDevices: loop
        ? Object.fromEntries(
            [...vm.config.keys()].filter(isDriveKey).flatMap((k) => {
              const dev = loop.deviceOf(vm.vmid, k);
              return dev ? [[k, dev]] : [];
            }),
          )
        : undefined,
    })),
  };
}
