// The program itself on bad and odd configuration: it runs src/main.ts as a process (so it
// belongs to the integration tier); the parsing is unit-tested in test/unit/config/.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { spawnProgram } from '../../helpers/program.js';
import { tempDir } from '../../helpers/temp-dir.js';

const SECRET = '5f9c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';
const good = `clusters:\n  - url: https://pve.example:8006/api2/json\n    insecure: false\n    token_id: "kubernetes-csi@pve!csi"\n    token_secret: "${SECRET}"\n    region: homelab\n`;

t.test('the program prints one line and exits 2 on bad flags or config, before opening a socket', async (t) => {
  const dir = tempDir(t, 'cfg-');
  const cfg = path.join(dir, 'config.yaml');
  fs.writeFileSync(cfg, good.replace('region: homelab', 'regoin: homelab'));
  const sock = path.join(dir, 'p.sock');
  const main = path.resolve('src/main.ts');
  for (const args of [
    ['--frobnicate'],
    ['--mode', 'controller', '--proxmox-endpoint', `unix://${sock}`, '--proxmox-config', cfg],
  ]) {
    const r = spawnSync(process.execPath, ['--import=tsx', main, ...args], { encoding: 'utf8', timeout: 30_000 });
    t.equal(r.status, 2, `exit 2 for ${args.join(' ')}`);
    t.equal(r.stderr.trim().split('\n').length, 1, 'one line: ' + r.stderr.trim());
    t.match(r.stderr, /^pve-nfs-csi: /);
  }
  t.notOk(fs.existsSync(sock), 'no socket was opened');
});

t.test('the program starts (no exit 2) on a config with unknown keys and logs the warning', async (t) => {
  const dir = tempDir(t, 'cfg-');
  const cfg = path.join(dir, 'config.yaml');
  fs.writeFileSync(
    cfg,
    `clusters:\n  - url: https://127.0.0.1:1/api2/json\n    token_id: "a@pve!b"\n    token_secret: "${SECRET}"\n    region: r\n    colour: blue\n`,
  );
  const sock = path.join(dir, 'p.sock');
  const child = spawnProgram(t, [
    '--mode',
    'controller',
    '--proxmox-endpoint',
    `unix://${sock}`,
    '--proxmox-config',
    cfg,
  ]);
  const first = await child.ready().then(
    () => 'ready',
    (e: unknown) => String(e),
  );
  t.equal(first, 'ready', 'serves instead of exiting');
  t.match(child.output(), /clusters\[0\]\.colour is not a key/);
  child.kill('SIGTERM');
  await child.exited;
});
