// Memory of one controller process serving both drivers (the chart's controller): RSS idle after
// start and after 2,000 mixed operations over gRPC (NFS Create/Delete against ganesha, Proxmox
// Create/Publish/Unpublish/Delete against the simulator), with V8's default heap sizing and with
// the image's heap budget (image/entrypoint.sh: old space = (limit - 96 MiB) / 2; --limit-mib
// picks the limit, default the chart's controller limit). Upstream's two Go controllers idle at
// 32.7 + 39.6 = 72 MiB on this machine (issue 15). Not offered: --lite-mode/--jitless (idle 67 MiB
// instead of 85, but no WebAssembly, which undici's HTTP parser needs: the Proxmox client fails).
//   npx tsx bench/rss.ts [--ops 2000] [--limit-mib 192] [--json] [--md]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { HOST_NODE, startNfsBackend, startProxmoxBackend } from '../scripts/lib/backends.js';
import { csiClient, type VolumeCapability } from '../test/helpers/csi-client.js';
import { rssMiB, startProgram } from './lib/program.js';
import { pool, printTable, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '2000' },
    'limit-mib': { type: 'string', default: '192' },
    json: { type: 'boolean', default: false },
    md: { type: 'boolean', default: false },
  },
});
const OPS = Number(values.ops);
const LIMIT = Number(values['limit-mib']);
const HEAP = Math.max(16, Math.floor((LIMIT - 96) / 2)); // the entrypoint's formula

const MOUNT: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
};
const NFS_CAP: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
};
const settle = () => new Promise((r) => setTimeout(r, 2000));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rss-'));
const px = await startProxmoxBackend(path.join(dir, 'px'), { backend: 'none' });
const nfs = await startNfsBackend(path.join(dir, 'nfs'));
const rows: Row[] = [];
const json: Record<string, number> = {};
try {
  const budget = `--max-old-space-size=${HEAP}`;
  for (const [label, nodeArgs] of [
    ['V8 defaults', []],
    [`${budget} (limit ${LIMIT} MiB)`, [budget]],
    [`${budget} --max-semi-space-size=1`, [budget, '--max-semi-space-size=1']],
  ] as const) {
    const pxEp = `unix://${dir}/px-${rows.length}.sock`;
    const nfsEp = `unix://${dir}/nfs-${rows.length}.sock`;
    const p = await startProgram(
      [
        '--mode',
        'controller',
        '--proxmox-endpoint',
        pxEp,
        '--nfs-endpoint',
        nfsEp,
        '--log-level',
        'warn',
        ...px.controllerArgs,
        ...nfs.controllerArgs,
      ],
      [pxEp, nfsEp],
      { nodeArgs: [...nodeArgs] },
    );
    const pc = csiClient(pxEp);
    const nc = csiClient(nfsEp);
    try {
      await settle();
      const idle = rssMiB(p.pid);
      let peak = idle;
      const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(p.pid))), 100);
      // Mixed: each NFS cycle is 2 operations, each Proxmox cycle 4; half the operations each.
      const nfsCycles = Array.from({ length: Math.round(OPS / 2 / 2) }, (_, i) => i);
      const pxCycles = Array.from({ length: Math.round(OPS / 2 / 4) }, (_, i) => i);
      let done = 0;
      const t0 = process.hrtime.bigint();
      await Promise.all([
        pool(nfsCycles, 4, async (i) => {
          const r = await nc.controller.CreateVolume({
            name: `pvc-rss-${rows.length}-${i}`,
            capacityRange: { requiredBytes: '1073741824' },
            volumeCapabilities: [NFS_CAP],
            parameters: {
              ...nfs.volumeParameters,
              subDir: 'rss/${pvc.metadata.name}',
              'csi.storage.k8s.io/pvc/name': `data-${i}`,
              'csi.storage.k8s.io/pvc/namespace': 'rss',
            },
          });
          await nc.controller.DeleteVolume({ volumeId: r.volume?.volumeId ?? '' });
          done += 2;
        }),
        pool(pxCycles, 4, async (i) => {
          const r = await pc.controller.CreateVolume({
            name: `pvc-rss-${rows.length}-${i}`,
            capacityRange: { requiredBytes: '1073741824' },
            volumeCapabilities: [MOUNT],
            parameters: px.volumeParameters,
            accessibilityRequirements: {
              preferred: [
                {
                  segments: {
                    'topology.kubernetes.io/region': HOST_NODE.region,
                    'topology.kubernetes.io/zone': HOST_NODE.zone,
                  },
                },
              ],
            },
          });
          const volumeId = r.volume?.volumeId ?? '';
          await pc.controller.ControllerPublishVolume({
            volumeId,
            nodeId: HOST_NODE.name,
            volumeCapability: MOUNT,
            volumeContext: r.volume?.volumeContext ?? {},
          });
          await pc.controller.ControllerUnpublishVolume({ volumeId, nodeId: HOST_NODE.name });
          await pc.controller.DeleteVolume({ volumeId });
          done += 4;
        }),
      ]);
      const opsMs = Number(process.hrtime.bigint() - t0) / 1e6;
      clearInterval(sampler);
      await settle();
      const after = rssMiB(p.pid);
      rows.push({ what: `idle, ${label}`, samples: [idle], note: 'Go: 32.7 + 39.6 = 72 MiB; goal ≤ 60' });
      rows.push({
        what: `after ${done} ops, ${label}`,
        samples: [after],
        note: `peak ${peak.toFixed(1)} MiB; ${done} ops took ${(opsMs / 1000).toFixed(1)} s; goal ≤ 100`,
      });
      json[`${label} idle`] = idle;
      json[`${label} after`] = after;
      json[`${label} peak`] = peak;
      json[`${label} ops ms`] = opsMs;
    } finally {
      pc.close();
      nc.close();
      await p.stop();
    }
  }
  if (values.json) console.log(JSON.stringify(json));
  else printTable({ title: 'Memory: one controller process serving both drivers (RSS)', unit: 'MiB', rows });
} finally {
  await px.close();
  await nfs.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
