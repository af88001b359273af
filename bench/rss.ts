// Memory of one controller process serving both drivers (the chart's controller): RSS idle after
// start and after 2,000 mixed operations over gRPC (NFS Create/Delete against ganesha, Proxmox
// Create/Publish/Unpublish/Delete against the simulator). Rows: as the image runs it (the bundle
// through image/entrypoint.sh: heap from the chart's memory limit, the image's V8 flags), and as
// before this budget (tsc's dist/src with V8's defaults); the node plugin serving both drivers
// idle. The minimum is a bare `node` idling (the binary's own pages and V8's empty heap); the goal
// (docs/design.md#resource-budget) is idle ≤ 60 MiB and ≤ 100 after load; upstream's two Go controllers idle at
// 32.7 + 39.6 = 72 MiB on this machine. --flags adds a row with other V8 flags (an experiment).
// Not offered: --lite-mode/--jitless (no WebAssembly, which undici's HTTP parser needs).
//   npx tsx bench/rss.ts [--ops 2000] [--limit-mib N] [--flags '--x --y'] [--json] [--md]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { HOST_NODE, startNfsBackend, startProxmoxBackend } from '../test/harness/backends.js';
import { spawnGuarded } from '../test/harness/reaper.js';
import { csiClient, type VolumeCapability } from '../test/helpers/csi-client.js';
import { chartLimitMiB, COMPILED_MAIN, rssMiB, startProgram, type StartOptions } from './lib/program.js';
import { pool, printTable, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '2000' },
    'limit-mib': { type: 'string' },
    flags: { type: 'string' },
    json: { type: 'boolean', default: false },
    md: { type: 'boolean', default: false },
  },
});
const OPS = Number(values.ops);
const LIMIT = values['limit-mib'] ? Number(values['limit-mib']) : chartLimitMiB('controller');
const IDLE_GOAL = 60;
const LOAD_GOAL = 100;

const MOUNT: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
};
const NFS_CAP: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
};
const settle = () => new Promise((r) => setTimeout(r, 2000));

/** RSS of a bare `node` idling: what any Node.js program costs before it loads anything. */
async function bareNodeMiB(): Promise<number> {
  const child = spawnGuarded(process.execPath, ['-e', 'setInterval(() => {}, 1e9)'], { stdio: 'ignore', env: {} });
  await settle();
  const rss = rssMiB(child.pid ?? -1);
  child.kill();
  return rss;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rss-'));
const px = await startProxmoxBackend(path.join(dir, 'px'), { backend: 'none' });
const nfs = await startNfsBackend(path.join(dir, 'nfs'));
const rows: Row[] = [];
const json: Record<string, number> = {};
try {
  const bare = await bareNodeMiB();
  json['bare node'] = bare;
  const variants: [string, StartOptions][] = [
    [`image (bundle, entrypoint, limit ${LIMIT} MiB)`, { limitMiB: LIMIT }],
    ['before (dist/src, V8 defaults)', { direct: { main: COMPILED_MAIN } }],
  ];
  if (values.flags !== undefined)
    variants.push([`image, flags "${values.flags}"`, { limitMiB: LIMIT, v8Flags: values.flags }]);
  for (const [label, start] of variants) {
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
      start,
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
      rows.push({
        what: `idle, ${label}`,
        samples: [idle],
        min: bare,
        note: `goal ≤ ${IDLE_GOAL}; Go: 32.7 + 39.6 = 72`,
      });
      rows.push({
        what: `after ${done} ops, ${label}`,
        samples: [after],
        min: bare,
        note: `goal ≤ ${LOAD_GOAL}; peak ${peak.toFixed(1)}; ${done} ops in ${(opsMs / 1000).toFixed(1)} s`,
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
  // The node plugin serving both drivers, as the image runs it with the chart's node limit (idle:
  // its work is mkfs and mount, measured in bench/node.ts).
  const kubelet = path.join(dir, 'kubelet');
  fs.mkdirSync(kubelet);
  const nodeEps = [`unix://${dir}/node-px.sock`, `unix://${dir}/node-nfs.sock`];
  const node = await startProgram(
    [
      '--mode',
      'node',
      '--node-id',
      HOST_NODE.name,
      '--kubelet-dir',
      kubelet,
      '--log-level',
      'warn',
      '--proxmox-endpoint',
      nodeEps[0] ?? '',
      '--nfs-endpoint',
      nodeEps[1] ?? '',
    ],
    nodeEps,
  );
  try {
    await settle();
    const idle = rssMiB(node.pid);
    json['node idle'] = idle;
    rows.push({
      what: `idle, node plugin, image (limit ${chartLimitMiB('node')} MiB)`,
      samples: [idle],
      min: bare,
      note: `goal ≤ ${IDLE_GOAL}`,
    });
  } finally {
    await node.stop();
  }
  if (values.json) console.log(JSON.stringify(json));
  else
    printTable({
      title: `Memory: one process serving both drivers (RSS; minimum = bare node idle, ${bare.toFixed(1)} MiB)`,
      unit: 'MiB',
      rows,
    });
} finally {
  await px.close();
  await nfs.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
