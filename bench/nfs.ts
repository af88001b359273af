// NFS controller benchmark against a private nfs-ganesha on 127.0.0.1, calling the backend
// directly (no gRPC): latency of CreateVolume and DeleteVolume(archive) one at a time, and the
// wall time of 200 creates (and their archive deletes) with 8 in flight.
//   npx tsx bench/nfs.ts [--n 200] [--parallel 8] [--json]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../src/csi/types.js';
import { createNfsController } from '../src/nfs/controller/controller.js';
import { defined } from '../src/defined.js';
import { startGanesha } from '../test/integration/nfs/ganesha.js';
import { pct, pool, timed } from './lib/table.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '200' },
    parallel: { type: 'string', default: '8' },
    json: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
const PARALLEL = Number(values.parallel);

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const cap: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
  accessType: 'mount',
};

function req(server: string, share: string, name: string, ns: string): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: String(1 << 30), limitBytes: '0' },
    volumeCapabilities: [cap],
    parameters: {
      server,
      share,
      subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
      onDelete: 'archive',
      uid: '1000',
      gid: '1000',
      mountPermissions: '0770',
      'csi.storage.k8s.io/pvc/namespace': ns,
      'csi.storage.k8s.io/pvc/name': `data-${name}`,
      'csi.storage.k8s.io/pv/name': name,
    },
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}

const g = await startGanesha();
const c = createNfsController({
  log: pino({ level: 'silent' }),
  callTimeoutMs: 10_000,
  nfsPort: g.nfsPort,
  mountPort: g.mountPort,
});
try {
  const share = `${g.share}/talos`;
  const create = (name: string, ns: string) =>
    c
      .createVolume(req(g.server, share, name, ns), ctx)
      .then((r) => defined(r.volume?.volumeId, 'the created volume id'));
  const remove = (volumeId: string) => c.deleteVolume({ volumeId, secrets: {} }, ctx);

  for (let i = 0; i < 5; i++) await remove(await create(`warm-${i}`, 'warm')); // connections, root handle

  const createMs: number[] = [];
  const deleteMs: number[] = [];
  const ids: string[] = [];
  for (let i = 0; i < N; i++) {
    createMs.push(await timed(async () => ids.push(await create(`pvc-seq-${i}`, `ns-${i % 10}`))));
  }
  for (const id of ids) deleteMs.push(await timed(() => remove(id)));

  const names = Array.from({ length: N }, (_, i) => `pvc-par-${i}`);
  const parIds: string[] = [];
  const parCreate = await timed(() =>
    pool(names, PARALLEL, async (n) => parIds.push(await create(n, `ns-${n.length % 10}`))),
  );
  const parDelete = await timed(() => pool(parIds, PARALLEL, remove));

  const rows: [string, string][] = [
    [`CreateVolume p50 (sequential, n=${N})`, `${pct(createMs, 50).toFixed(2)} ms`],
    [`CreateVolume p95 (sequential, n=${N})`, `${pct(createMs, 95).toFixed(2)} ms`],
    [`DeleteVolume archive p50 (sequential, n=${N})`, `${pct(deleteMs, 50).toFixed(2)} ms`],
    [`DeleteVolume archive p95 (sequential, n=${N})`, `${pct(deleteMs, 95).toFixed(2)} ms`],
    [`${N} CreateVolume, ${PARALLEL} in flight (wall)`, `${parCreate.toFixed(0)} ms`],
    [`${N} DeleteVolume archive, ${PARALLEL} in flight (wall)`, `${parDelete.toFixed(0)} ms`],
  ];
  if (values.json) {
    console.log(
      JSON.stringify({
        createMs: { p50: pct(createMs, 50), p95: pct(createMs, 95) },
        deleteArchiveMs: { p50: pct(deleteMs, 50), p95: pct(deleteMs, 95) },
        parallelCreateWallMs: parCreate,
        parallelDeleteWallMs: parDelete,
        n: N,
        parallel: PARALLEL,
      }),
    );
  } else {
    const w = Math.max(...rows.map((r) => r[0].length));
    console.log(
      `NFS controller (backend called directly; nfs-ganesha 127.0.0.1, NFSv3 over TCP, seed StorageClass + uid/gid/mode)`,
    );
    console.log(`${'metric'.padEnd(w)}  value`);
    console.log(`${'-'.repeat(w)}  ${'-'.repeat(10)}`);
    for (const [k, v] of rows) console.log(`${k.padEnd(w)}  ${v}`);
  }
} finally {
  await c.close();
  await g.stop();
}
