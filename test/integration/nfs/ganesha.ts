// Starts and stops a private nfs-ganesha (scripts/ganesha.sh) for one test file or the bench.
// Each caller gets its own directory and free ports, so test files running in parallel never
// stop a server another file is using.
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from '../../helpers/free-port.js';
import { undoOnExit } from '../../harness/reaper.js';

const run = promisify(execFile);
const SCRIPT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../scripts/ganesha.sh');

export interface GaneshaInfo {
  server: string;
  /** Exported share as clients see it: /volume1/k8s-volumes (with a `talos` subdirectory). */
  share: string;
  nfsPort: number;
  mountPort: number;
  /** The export on the local disk, to check results directly. */
  exportDir: string;
  pidFile: string;
}

export interface Ganesha extends GaneshaInfo {
  dir: string;
  stop(): Promise<void>;
  /** Starts it again in the same directory on the same ports (after a kill). */
  restart(): Promise<void>;
}

async function script(cmd: string, args: string[]): Promise<string> {
  const { stdout } = await run('bash', [SCRIPT, cmd, ...args], { timeout: 180_000 });
  return stdout.trim();
}

export async function startGanesha(
  opts: {
    dir?: string;
    nfsPort?: number;
    mountPort?: number;
    v4only?: boolean;
    /** More exports, `PSEUDO=REL` (REL below the server's directory; see scripts/ganesha.sh). */
    extraExports?: readonly string[];
  } = {},
): Promise<Ganesha> {
  const dir = opts.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'pve-nfs-csi-ganesha-')));
  const nfsPort = opts.nfsPort ?? (await freePort());
  let mountPort = opts.mountPort ?? (await freePort());
  while (mountPort === nfsPort) mountPort = await freePort();
  const args = [
    '--dir',
    dir,
    '--nfs-port',
    String(nfsPort),
    '--mount-port',
    String(mountPort),
    ...(opts.v4only ? ['--protocols', '4'] : []),
    ...(opts.extraExports ?? []).flatMap((e) => ['--extra-export', e]),
  ];
  // ganesha daemonizes: if this process ends without stopping it (kill -9 of the test or the
  // bench), test/harness/reaper.sh does. Registered before the start, released after the stop.
  let release = undoOnExit({ run: ['bash', SCRIPT, 'stop', ...args] });
  const info = JSON.parse(await script('start', args)) as GaneshaInfo;
  return {
    ...info,
    dir,
    stop: async () => {
      await script('stop', args);
      release();
    },
    restart: async () => {
      release();
      release = undoOnExit({ run: ['bash', SCRIPT, 'stop', ...args] });
      await script('start', args);
    },
  };
}
