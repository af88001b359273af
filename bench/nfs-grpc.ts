// NFS controller over gRPC (the compiled program as its own process, NFS driver only) against a
// private nfs-ganesha on 127.0.0.1: CreateVolume, DeleteVolume with each onDelete policy, and 200
// creates with 8 in flight (per-call latency and wall time). bench/nfs.ts calls the backend
// in-process, without gRPC.
//   npx tsx bench/nfs-grpc.ts [--n 100] [--md]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startNfsBackend } from '../scripts/lib/backends.js';
import { csiClient, type VolumeCapability } from '../test/helpers/csi-client.js';
import { startProgram } from './lib/program.js';
import { pool, printTable, since, timed, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '100' },
    parallel: { type: 'string', default: '8' },
    md: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
const PAR = Number(values.parallel);
const CAP: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-nfs-grpc-'));
const nfs = await startNfsBackend(path.join(dir, 'nfs'));
const ep = `unix://${dir}/nfs.sock`;
const p = await startProgram(
  ['--mode', 'controller', '--nfs-endpoint', ep, '--log-level', 'warn', ...nfs.controllerArgs],
  [ep],
);
const c = csiClient(ep);
try {
  const create = async (name: string, onDelete: string): Promise<string> => {
    const r = await c.controller.CreateVolume({
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
        'csi.storage.k8s.io/pvc/namespace': 'bench',
        'csi.storage.k8s.io/pvc/name': `data-${name}`,
        'csi.storage.k8s.io/pv/name': name,
      },
    });
    return r.volume?.volumeId ?? '';
  };
  const remove = (volumeId: string) => c.controller.DeleteVolume({ volumeId });
  for (let i = 0; i < 5; i++) await remove(await create(`warm-${i}`, 'delete'));

  const rows: Row[] = [];
  const createMs: number[] = [];
  for (const policy of ['delete', 'retain', 'archive']) {
    const ids: string[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = process.hrtime.bigint();
      ids.push(await create(`pvc-${policy}-${i}`, policy));
      createMs.push(since(t0));
    }
    const del: number[] = [];
    for (const id of ids) del.push(await timed(() => remove(id)));
    rows.push({ what: `DeleteVolume, onDelete: ${policy}`, samples: del });
  }
  rows.unshift({ what: 'CreateVolume (uid/gid/mode set)', samples: createMs });
  const names = Array.from({ length: 200 }, (_, i) => `pvc-par-${i}`);
  const par: number[] = [];
  const parIds: string[] = [];
  const wall = await timed(() =>
    pool(names, PAR, async (n) => {
      const t0 = process.hrtime.bigint();
      parIds.push(await create(n, 'delete'));
      par.push(since(t0));
    }),
  );
  rows.push({
    what: `CreateVolume, 200 with ${PAR} in flight (each)`,
    samples: par,
    note: `wall ${wall.toFixed(0)} ms = ${(wall / 200).toFixed(2)} ms per create`,
  });
  await pool(parIds, PAR, remove);
  printTable({
    title: `NFS controller over gRPC (program process, ganesha on 127.0.0.1, NFSv3; ${N} per row)`,
    unit: 'ms',
    rows,
  });
} finally {
  c.close();
  await p.stop();
  await nfs.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
