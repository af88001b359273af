// NFS snapshot and restore of a 10k-file tree (100 directories × 100 files of 4 KiB, plus one
// 64 MiB file) against a private nfs-ganesha on 127.0.0.1, through the controller backend (the
// copy over its NFSv3 client), next to upstream's cost for the same tree: `tar -czf` and
// `tar -xzf` of the export directory on the local disk (what csi-driver-nfs runs on its mount,
// without the NFS hop, so a lower bound for it).
//   npx tsx bench/nfs-snapshot.ts [--files 10000]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../src/csi/types.js';
import { createNfsController } from '../src/nfs/controller/controller.js';
import { startGanesha } from '../test/integration/nfs/ganesha.js';

const { values } = parseArgs({ options: { files: { type: 'string', default: '10000' } } });
const files = Number(values.files);
const g = await startGanesha();
const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const c = createNfsController({
  log: pino({ level: 'silent' }),
  callTimeoutMs: 30_000,
  nfsPort: g.nfsPort,
  mountPort: g.mountPort,
});
const share = `${g.share}/talos`;
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
const req = (name: string, source: CreateVolumeRequest['volumeContentSource'] = null): CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: '1024', limitBytes: '0' },
  volumeCapabilities: [cap as unknown as VolumeCapability],
  parameters: { server: g.server, share },
  secrets: {},
  volumeContentSource: source,
  accessibilityRequirements: null,
  mutableParameters: {},
});
const secs = (t0: number) => ((Date.now() - t0) / 1000).toFixed(1);
try {
  const vol = (await c.createVolume(req('pvc-bench'), ctx)).volume?.volumeId ?? '';
  const root = path.join(g.exportDir, 'talos', 'pvc-bench');
  const per = 100;
  const block = Buffer.alloc(4096, 7);
  for (let d = 0; d < files / per; d++) {
    await fs.mkdir(path.join(root, `d${d}`));
    for (let f = 0; f < per; f++) await fs.writeFile(path.join(root, `d${d}`, `f${f}`), block);
  }
  await fs.writeFile(path.join(root, 'big'), Buffer.alloc(64 << 20, 1));
  let t0 = Date.now();
  const snap = await c.createSnapshot?.({ name: 'bench', sourceVolumeId: vol, secrets: {}, parameters: {} }, ctx);
  const snapS = secs(t0);
  t0 = Date.now();
  await c.createVolume(req('pvc-restored', { snapshot: { snapshotId: snap?.snapshot?.snapshotId ?? '' } }), ctx);
  const restoreS = secs(t0);
  const tgz = path.join(g.dir, 'up.tar.gz');
  t0 = Date.now();
  execFileSync('tar', ['-C', root, '-czf', tgz, '.']);
  const tarS = secs(t0);
  await fs.mkdir(path.join(g.dir, 'untar'));
  t0 = Date.now();
  execFileSync('tar', ['-xzf', tgz, '-C', path.join(g.dir, 'untar')]);
  const untarS = secs(t0);
  console.log(`| tree | snapshot (ours) | restore (ours) | upstream tar -czf (local, lower bound) | tar -xzf |`);
  console.log(`|---|---|---|---|---|`);
  console.log(`| ${files} × 4 KiB + 64 MiB | ${snapS} s | ${restoreS} s | ${tarS} s | ${untarS} s |`);
} finally {
  await c.close();
  await g.stop();
}
