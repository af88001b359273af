// Upstream's node plugin (sergelogvinov/proxmox-csi-plugin, cmd/node) beside ours in bench/node.ts,
// on its own unix socket and the same loop device. Nothing here builds it: the Go module proxy
// serves neither github.com/sergelogvinov/proxmox-csi-plugin nor its github.com/sergelogvinov/
// go-proxmox dependency (both answered 403 "not available" on 2026-12-02), so there is no
// `go install` that could. The bench uses a binary that is already there, cached by version:
//   ~/.cache/pve-nfs-csi/upstream-proxmox-csi-node-<version>/proxmox-csi-node
// (or BENCH_UPSTREAM_NODE=/path/to/binary), and skips the upstream rows, saying why, without one.
//
// What it needs to run off a cluster, read from its v0.19.1 source: main() refuses to serve until
// it has read its own Node object from the Kubernetes API (GET /api/v1/nodes/<node-id>, for the
// topology labels), with no flag to skip that; `--master` points it at a URL. So a stand-in API
// on 127.0.0.1 answers exactly that one request. Stage/Publish/Unpublish/Unstage touch neither
// Kubernetes nor Proxmox. The disk: its getDevicePath scans /sys/bus/scsi/devices for a QEMU
// disk whose wwid matches a /dev/disk/by-id/wwn-0x… DevicePath and otherwise uses DevicePath
// itself once it exists, so the publish context names the rig's wwn-0x… link directly.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawnGuarded } from '../../test/harness/reaper.js';
import { probeOnce } from './program.js';

export const UPSTREAM_NODE_VERSION = 'v0.19.1';

const cacheDir = () => process.env['PVE_NFS_CSI_CACHE'] ?? path.join(os.homedir(), '.cache', 'pve-nfs-csi');

/** The binary, or why the upstream rows are skipped. */
export function upstreamNodeBinary(): { bin: string } | { skip: string } {
  const bin =
    process.env['BENCH_UPSTREAM_NODE'] ??
    path.join(cacheDir(), `upstream-proxmox-csi-node-${UPSTREAM_NODE_VERSION}`, 'proxmox-csi-node');
  try {
    fs.accessSync(bin, fs.constants.X_OK);
    return { bin };
  } catch {
    return {
      skip:
        `upstream rows skipped: no proxmox-csi-plugin ${UPSTREAM_NODE_VERSION} node binary at ${bin} ` +
        '(the Go module proxy does not serve that module, so the bench cannot go install it; ' +
        'put a build of its cmd/node there or set BENCH_UPSTREAM_NODE)',
    };
  }
}

export interface UpstreamNode {
  pid: number;
  stop(): Promise<void>;
}

/** The one Kubernetes API call upstream's main() makes: its own Node, with topology labels. */
async function fakeKubeApi(nodeName: string): Promise<http.Server> {
  const node = JSON.stringify({
    kind: 'Node',
    apiVersion: 'v1',
    metadata: {
      name: nodeName,
      labels: { 'topology.kubernetes.io/region': 'bench', 'topology.kubernetes.io/zone': 'bench' },
    },
  });
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url?.split('?')[0] === `/api/v1/nodes/${nodeName}`) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(node);
    } else {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

/** Starts it on `socket`; resolves once it answers Probe. */
export async function startUpstreamNode(bin: string, socket: string, nodeName: string): Promise<UpstreamNode> {
  const api = await fakeKubeApi(nodeName);
  const { port } = api.address() as AddressInfo;
  const ep = `unix://${socket}`;
  // klog at its default verbosity: what it logs in a cluster (an Info line per format), to nowhere.
  const child: ChildProcess = spawnGuarded(
    bin,
    [`--csi-address=${ep}`, `--node-id=${nodeName}`, `--master=http://127.0.0.1:${port}`],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin' } },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < 64 * 1024) stderr += d.toString();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const state = { dead: false };
  void exited.then(() => (state.dead = true));
  const stop = async () => {
    if (!state.dead) child.kill('SIGTERM');
    await exited;
    await new Promise<void>((resolve) => api.close(() => resolve()));
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (state.dead) {
      await stop();
      throw new Error(`upstream node plugin exited before serving ${ep}: ${stderr.trim()}`);
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`upstream node plugin: no Probe answer on ${ep} within 30 s: ${stderr.trim()}`);
    }
    if (fs.existsSync(socket) && (await probeOnce(ep))) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  return { pid: child.pid ?? -1, stop };
}
