// The pve-real tier's Proxmox VE: Proxmox VE 9's own Perl API code (test/pve-real/start.sh) served
// over HTTPS from a private mount namespace, with the role, user and token made by the real
// `pveum` from the privileges the docs give. Started per test file (its state in a temp folder),
// stopped on the test's teardown. What is real and what is a stand-in: docs/testing.md.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import type { ProxmoxClusterConfig } from '../../src/config/types.js';
import os from 'node:os';
import type { Teardown } from './teardown.js';

const START = path.resolve(import.meta.dirname, '../pve-real/start.sh');
/** The one node's name (= the Kubernetes zone). */
export const PVE_REAL_NODE = 'hyper1';

export interface PveReal {
  cluster: ProxmoxClusterConfig;
  /** The plain directory that stands in for pmxcfs's /etc/pve. */
  etcPve: string;
  /** A VM's config file as qemu-server wrote it, or undefined when the VM does not exist. */
  vmConfig(vmid: number): string | undefined;
  /** The thin volumes of the lvm stand-in's volume group `pve` (name → size in bytes). */
  lvs(): Record<string, number>;
  /** The server's stderr so far (Perl warnings, tasks' errors). */
  log(): string;
  /** Each API call so far as `METHOD /path/{vmid}… param,names STATUS`, the path's ids generalised. */
  requests(): string[];
}

function requestsOf(state: string): string[] {
  const f = path.join(state, 'requests.log');
  if (!fs.existsSync(f)) return [];
  return fs
    .readFileSync(f, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [method = '', p = '', params = '', status = ''] = l.split('\t');
      return requestShape(method, p, params, status);
    });
}

/** A request's path with its variable parts named as the API schema names them. */
function requestShape(method: string, path: string, params: string, status: string): string {
  const p = path
    .replace(/\/nodes\/[^/]+/, '/nodes/{node}')
    .replace(/\/qemu\/\d+/, '/qemu/{vmid}')
    .replace(/\/storage\/[^/]+/, '/storage/{storage}')
    .replace(/\/content\/[^/]+/, '/content/{volume}')
    .replace(/\/tasks\/[^/]+/, '/tasks/{upid}')
    .replace(/\/snapshot\/[^/]+/, '/snapshot/{snapname}');
  return `${method} ${p} ${params} ${status}`;
}

interface LvmState {
  lvs: Record<string, { size: number }>;
}

/** Starts the real API with a role holding `privileges` (space-separated, as `pveum role add -privs`). */
export async function startPveReal(
  t: Teardown,
  privileges: string,
  o: { onStop?: (requests: string[]) => void } = {},
): Promise<PveReal> {
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-real-'));
  const child = spawn('bash', [START, state], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PVE_REAL_PRIVS: privileges },
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  t.teardown(async () => {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      if (child.exitCode === null) await exited;
    } catch {
      // already gone
    }
    o.onStop?.(requestsOf(state));
    fs.rmSync(state, { recursive: true, force: true });
  });
  const port = await new Promise<number>((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.on('line', (l) => {
      const m = /^listening (\d+)$/.exec(l);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`pve-real server exited (${String(code)}): ${stderr}`)));
  });
  const token = JSON.parse(fs.readFileSync(path.join(state, 'token'), 'utf8')) as {
    'full-tokenid': string;
    value: string;
  };
  const etcPve = path.join(state, 'pve');
  const read = (f: string): string | undefined => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : undefined);
  return {
    cluster: {
      url: `https://127.0.0.1:${String(port)}/api2/json`,
      insecure: false,
      caFile: path.join(state, 'tls', 'cert.pem'),
      tokenId: token['full-tokenid'],
      tokenSecret: token.value,
      region: 'homelab',
    },
    etcPve,
    vmConfig: (vmid) => read(path.join(etcPve, 'nodes', PVE_REAL_NODE, 'qemu-server', `${String(vmid)}.conf`)),
    lvs: () => {
      const s = read(path.join(state, 'lvm', 'state.json'));
      const lvs = s === undefined ? {} : (JSON.parse(s) as LvmState).lvs;
      return Object.fromEntries(Object.entries(lvs).map(([k, v]) => [k, v.size]));
    },
    log: () => stderr,
    requests: () => requestsOf(state),
  };
}
