// The bundle's V8 code cache (Node's compile cache, `NODE_COMPILE_CACHE`): made once when the
// bundle is built, by starting the program through image/entrypoint.sh in each role with both
// drivers until every socket answers, then stopping it. Node writes the code of every function
// compiled by then at exit, so the next start neither parses nor compiles them (the entrypoint
// points NODE_COMPILE_CACHE at it). Node keys the cache by its own version, V8's flag hash and
// the user id, and silently ignores a cache that does not match: the build stage runs the same
// node binary as the runtime stage (one FROM), the warm-up runs with the entrypoint's start flags
// and without the flags set after start, and the entries are copied for the ids the image runs as.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The users the image runs as: the node plugin as root, the controller as 65532 (Dockerfile). */
const IMAGE_UIDS = [0, 65532];
const READY_TIMEOUT_MS = 60_000;
const SETTLE_MS = 500;

/** Starts `entrypoint` with `args` and NODE_COMPILE_CACHE=`cacheDir`; resolves once it has exited after serving. */
async function startAndStop(entrypoint: string, main: string, cacheDir: string, args: string[]): Promise<void> {
  const child = spawn('/bin/sh', [entrypoint, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: `${path.dirname(process.execPath)}:${process.env['PATH'] ?? ''}`,
      PVE_NFS_CSI_MAIN: main,
      NODE_COMPILE_CACHE: cacheDir,
      // Keyed by the path relative to the cache: the image builds in /src and runs from /app.
      NODE_COMPILE_CACHE_PORTABLE: '1',
      PVE_NFS_CSI_V8_FLAGS_AFTER_START: '',
      CGROUP_ROOT: '/nonexistent',
    },
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<boolean>((resolve) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('"ready":true')) resolve(true);
    });
    void exited.then(() => resolve(false));
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), READY_TIMEOUT_MS);
  try {
    if (!(await ready)) throw new Error(`compile cache warm-up (${args.join(' ')}) exited before serving: ${err}`);
    // The ready line comes just before the program installs its SIGTERM handler (main.ts).
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    child.kill('SIGTERM');
    const code = await exited;
    if (code !== 0) throw new Error(`compile cache warm-up (${args.join(' ')}) exited with ${code}: ${err}`);
  } finally {
    clearTimeout(timer);
  }
}

/** Builds `<bundleDir>/compile-cache` for the controller and the node plugin serving both drivers. */
export async function buildCompileCache(root: string, bundleDir: string): Promise<string> {
  const cacheDir = path.join(bundleDir, 'compile-cache');
  const main = path.join(bundleDir, 'main.js');
  const entrypoint = path.join(root, 'image/entrypoint.sh');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'compile-cache-'));
  try {
    // A Proxmox controller needs a config; nothing listens on port 1 and nothing is contacted at start.
    const cfg = path.join(tmp, 'proxmox.yaml');
    fs.writeFileSync(
      cfg,
      'clusters:\n  - url: https://127.0.0.1:1/api2/json\n    insecure: true\n    token_id: "warm@pve!csi"\n    token_secret: "00000000-0000-0000-0000-000000000000"\n    region: warm\n',
    );
    fs.mkdirSync(path.join(tmp, 'kubelet'));
    const common = ['--node-id', 'warm', '--kubelet-dir', path.join(tmp, 'kubelet'), '--log-level', 'error'];
    for (const mode of ['controller', 'node']) {
      const eps = [
        '--proxmox-endpoint',
        `unix://${tmp}/${mode}-px.sock`,
        '--nfs-endpoint',
        `unix://${tmp}/${mode}-nfs.sock`,
      ];
      await startAndStop(entrypoint, main, cacheDir, [
        '--mode',
        mode,
        ...common,
        ...eps,
        ...(mode === 'controller' ? ['--proxmox-config', cfg] : []),
      ]);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  // One directory per node version, flag hash and user id ("v24.22.3-x64-964aae3f-0").
  const made = fs.readdirSync(cacheDir).filter((d) => /-\d+$/.test(d));
  if (made.length === 0) throw new Error(`${cacheDir}: node wrote no compile cache`);
  for (const dir of made) {
    for (const uid of IMAGE_UIDS) {
      const copy = dir.replace(/-\d+$/, `-${uid}`);
      if (copy !== dir) fs.cpSync(path.join(cacheDir, dir), path.join(cacheDir, copy), { recursive: true });
    }
  }
  // Readable by the controller's user (Node writes its entries 0600).
  for (const dir of fs.readdirSync(cacheDir)) {
    fs.chmodSync(path.join(cacheDir, dir), 0o755);
    for (const f of fs.readdirSync(path.join(cacheDir, dir))) fs.chmodSync(path.join(cacheDir, dir, f), 0o644);
  }
  return cacheDir;
}
