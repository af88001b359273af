import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { csiClient } from '../../helpers/csi-client.js';

// The real program: both drivers in node mode on unix sockets, Identity answered on each with
// its own name, then SIGTERM → exit 0 with the sockets removed.
t.test('main: serves both endpoints and exits 0 on SIGTERM leaving no socket', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'csi-main-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const pve = path.join(dir, 'proxmox.sock');
  const nfs = path.join(dir, 'nfs.sock');
  const child = spawn(process.execPath, ['--import=tsx', path.resolve('src/main.ts'), '--mode', 'node', '--node-id', 'talos-worker-1',
    '--region', 'homelab', '--zone', 'hyper1', '--proxmox-endpoint', `unix://${pve}`, '--nfs-endpoint', `unix://${nfs}`,
    '--metrics-address', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('not ready: ' + out)), 30_000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('"ready":true')) { clearTimeout(timer); resolve(); }
    });
  });
  for (const [sock, name] of [[pve, 'csi.proxmox.sinextra.dev'], [nfs, 'nfs.csi.k8s.io']] as const) {
    const c = csiClient(`unix://${sock}`);
    t.equal((await c.identity('GetPluginInfo')).name, name);
    t.equal((await c.identity('Probe')).ready.value, true);
    t.ok((await c.node('NodeGetInfo')).nodeId === 'talos-worker-1');
    c.close();
  }
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'exit code 0');
  t.notOk(fs.existsSync(pve), 'proxmox socket removed');
  t.notOk(fs.existsSync(nfs), 'nfs socket removed');
});
