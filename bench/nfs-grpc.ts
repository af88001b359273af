// NFS controller over gRPC (the compiled program as its own process, NFS driver only) against a
// private nfs-ganesha on 127.0.0.1, each row next to its raw-ganesha minimum: the same NFSv3
// operations sent straight from the client library the controller uses (src/nfs/client, one
// connection, root handle cached), no gRPC and no controller in between:
//   create            LOOKUP parent, MKDIR with mode/uid/gid                         2 calls
//   delete (empty)    LOOKUP parent, RMDIR                                           2 calls
//   retain            nothing                                                        0 calls
//   archive           LOOKUP parent, LOOKUP archived-parent, LOOKUP target (must     4 calls
//                     not exist: an archive is never replaced), RENAME
// Calls per operation are counted on the wire by a relay in front of ganesha
// (test/helpers/rpc-counter.ts), against a second program process pointed at it. Then 200
// creates at 1, 2, 4 and 8 in flight, with the CPU each process spent per create: per-call
// latency with k in flight is k × (wall time per create) (Little's law), and the wall time per
// create is bounded by the CPU the three processes need on 2 cores.
//   npx tsx bench/nfs-grpc.ts [--n 100] [--md]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startNfsBackend } from '../test/harness/backends.js';
import { NfsSession } from '../src/nfs/client/session.js';
import { csiClient, type VolumeCapability } from '../test/helpers/csi-client.js';
import { startRpcCounter } from '../test/helpers/rpc-counter.js';
import { cpuMs, startProgram } from './lib/program.js';
import { pct, pool, printTable, since, timed, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '100' },
    md: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
const CAP: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
};
const NS = 'bench';
const fmt = (x: number) => x.toFixed(2);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-nfs-grpc-'));
const nfs = await startNfsBackend(path.join(dir, 'nfs'));
const nfsPort = Number(nfs.info.nfsPort);
const { mountPort } = nfs.info;
const ganeshaPid = Number(fs.readFileSync(path.join(dir, 'nfs', 'ganesha', 'ganesha.pid'), 'utf8'));
const relay = await startRpcCounter(nfsPort);
const args = (ep: string, port: number) => [
  '--mode',
  'controller',
  '--nfs-endpoint',
  ep,
  '--log-level',
  'warn',
  '--nfs-port',
  String(port),
  '--nfs-mount-port',
  mountPort,
];
const ep = `unix://${dir}/nfs.sock`;
const epCounted = `unix://${dir}/nfs-counted.sock`;
const p = await startProgram(args(ep, nfsPort), [ep]);
const pc = await startProgram(args(epCounted, relay.port), [epCounted]);
const c = csiClient(ep);
const cc = csiClient(epCounted);
const session = new NfsSession({ server: '127.0.0.1', timeoutMs: 10_000, nfsPort, mountPort: Number(mountPort) });

try {
  const makeCreate = (client: typeof c) => async (name: string, onDelete: string) => {
    const r = await client.controller.CreateVolume({
      name,
      capacityRange: { requiredBytes: '1073741824' },
      volumeCapabilities: [CAP],
      parameters: {
        ...nfs.volumeParameters,
        subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
        onDelete,
        uid: '1000',
        gid: '1000',
        mountPermissions: '0770',
        'csi.storage.k8s.io/pvc/namespace': NS,
        'csi.storage.k8s.io/pvc/name': `data-${name}`,
        'csi.storage.k8s.io/pv/name': name,
      },
    });
    return r.volume?.volumeId ?? '';
  };
  const create = makeCreate(c);
  const remove = (volumeId: string) => c.controller.DeleteVolume({ volumeId });

  // The raw minimum: the same directory operations straight from the client library.
  const nfs3 = session.nfs;
  const root = await session.rootHandle(nfs.volumeParameters['share'] ?? '');
  const ATTRS = { mode: 0o770, uid: 1000, gid: 1000 };
  const parentOf = async (name: string) => (await nfs3.lookup(root, name)).handle;
  const rawCreate = async (name: string) => {
    await nfs3.mkdir(await parentOf(NS), name, ATTRS);
  };
  const rawDelete = async (name: string) => {
    await nfs3.rmdir(await parentOf(NS), name);
  };
  const rawArchive = async (name: string) => {
    const from = await parentOf(NS);
    const to = await parentOf(`archived-${NS}`);
    await nfs3.lookup(to, `${name}-raw`).then(
      () => {
        throw new Error(`archived-${NS}/${name}-raw exists`);
      },
      () => undefined,
    );
    await nfs3.rename(from, name, to, `${name}-raw`);
  };

  // Warm both programs (connections, root handles, the namespace and archive parents).
  for (let i = 0; i < 5; i++) {
    await remove(await create(`warm-${i}`, 'delete'));
    await cc.controller.DeleteVolume({ volumeId: await makeCreate(cc)(`warm-c-${i}`, 'archive') });
  }
  await remove(await create('warm-archive', 'archive'));

  const rows: Row[] = [];
  const createMs: number[] = [];
  const rawCreateMs: number[] = [];
  const delRows: Row[] = [];
  for (const policy of ['delete', 'retain', 'archive'] as const) {
    const ids: string[] = [];
    const rawNames: string[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = process.hrtime.bigint();
      ids.push(await create(`pvc-${policy}-${i}`, policy));
      createMs.push(since(t0));
      const name = `raw-${policy}-${i}`;
      rawCreateMs.push(await timed(() => rawCreate(name)));
      rawNames.push(name);
    }
    const del: number[] = [];
    const rawDel: number[] = [];
    for (const [i, id] of ids.entries()) {
      del.push(await timed(() => remove(id)));
      const name = rawNames[i] ?? '';
      if (policy === 'delete') rawDel.push(await timed(() => rawDelete(name)));
      else if (policy === 'archive') rawDel.push(await timed(() => rawArchive(name)));
      else await rawDelete(name); // retain: the minimum is doing nothing
    }
    const rawP50 = rawDel.length ? pct(rawDel, 50) : undefined;
    delRows.push({
      what: `DeleteVolume, onDelete: ${policy}`,
      samples: del,
      min: rawP50,
      note:
        rawP50 === undefined ? 'minimum: no call at all' : `minimum = raw p50 (raw min ${fmt(Math.min(...rawDel))})`,
    });
  }
  rows.push({
    what: 'CreateVolume (uid/gid/mode set)',
    samples: createMs,
    min: pct(rawCreateMs, 50),
    note: `minimum = raw p50 (raw min ${fmt(Math.min(...rawCreateMs))})`,
  });
  rows.push(...delRows);

  // 200 creates at k in flight: latency per call, wall time per create, CPU per create.
  const ALL = 200;
  const conc: Row[] = [];
  for (const k of [1, 2, 4, 8]) {
    const names = Array.from({ length: ALL }, (_, i) => `pvc-par${k}-${i}`);
    const lat: number[] = [];
    const ids: string[] = [];
    const cpu0 = [cpuMs(p.pid), cpuMs(ganeshaPid), process.cpuUsage()] as const;
    const wall = await timed(() =>
      pool(names, k, async (n) => {
        const t0 = process.hrtime.bigint();
        ids.push(await create(n, 'delete'));
        lat.push(since(t0));
      }),
    );
    const self = process.cpuUsage(cpu0[2]);
    const per = (x: number) => fmt(x / ALL);
    const cpuNote =
      `CPU/create: program ${per(cpuMs(p.pid) - cpu0[0])}, ganesha ${per(cpuMs(ganeshaPid) - cpu0[1])}, ` +
      `gRPC client ${per((self.user + self.system) / 1000)}`;
    await pool(ids, 8, remove);
    const rawLat: number[] = [];
    const rawWall = await timed(() =>
      pool(names, k, async (n) => {
        rawLat.push(await timed(() => rawCreate(`raw-${n}`)));
      }),
    );
    await pool(names, 8, (n) => rawDelete(`raw-${n}`));
    conc.push({
      what: `CreateVolume, ${ALL} with ${k} in flight (each)`,
      samples: lat,
      min: pct(rawLat, 50),
      note: `wall ${per(wall)}/create (raw ${per(rawWall)}); ${cpuNote}`,
    });
  }

  // Calls on the wire per operation, through the counting relay.
  const counted = makeCreate(cc);
  const K = 5;
  const wire: Row[] = [];
  const countOps = async (what: string, minimum: number, op: (i: number) => Promise<unknown>) => {
    const per: number[] = [];
    let last = '';
    for (let i = 0; i < K; i++) {
      relay.reset();
      await op(i);
      per.push(relay.total());
      last = [...relay.counts()].map(([proc, n]) => `${proc}×${n}`).join(' ');
    }
    wire.push({ what, samples: per, min: minimum, note: last });
  };
  for (const policy of ['delete', 'retain', 'archive'] as const) {
    const ids: string[] = [];
    await countOps(`CreateVolume (onDelete: ${policy})`, 2, async (i) =>
      ids.push(await counted(`cnt-${policy}-${i}`, policy)),
    );
    const minimum = { delete: 2, retain: 0, archive: 4 }[policy];
    await countOps(`DeleteVolume, onDelete: ${policy}`, minimum, (i) =>
      cc.controller.DeleteVolume({ volumeId: ids[i] ?? '' }),
    );
  }
  // The delete policy's 3rd call is the RMDIR of the emptied parent (the namespace directory):
  // it stays while other claims live in it; csi-driver-nfs leaves empty parents behind.

  printTable({
    title: `NFS controller over gRPC (program process, ganesha on 127.0.0.1, NFSv3; ${N} per row; minimum: the same NFS calls straight from the client library)`,
    unit: 'ms',
    rows,
  });
  printTable({ title: 'NFS CreateVolume with k in flight (200 each)', unit: 'ms', rows: conc });
  printTable({
    title: `NFS calls on the wire per operation (counted by a relay in front of ganesha; ${K} each)`,
    unit: 'calls',
    rows: wire,
  });
} finally {
  c.close();
  cc.close();
  session.close();
  await p.stop();
  await pc.stop();
  await relay.close();
  await nfs.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
