// `npm run sim` entry point: one JSON line on stdout, clean exit and cleanup on SIGTERM.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import t from 'tap';
import { Agent, fetch } from 'undici';
import type { RunningSimulator } from '../index.js';

t.test('prints url, caFile, tokenId, tokenSecret, adminUrl and cleans up on SIGTERM', async (t) => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'sim/main.ts', '--faults', '{"authFailureDelayMs":0}'], {
    cwd: new URL('../..', import.meta.url).pathname,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const lines = createInterface({ input: child.stdout });
  const [line] = (await once(lines, 'line')) as [string];
  // The ready line: these fields of the running simulator (sim/main.ts), checked just below.
  const info = JSON.parse(line) as Pick<
    RunningSimulator,
    'url' | 'caFile' | 'tokenId' | 'tokenSecret' | 'adminUrl' | 'stateDir'
  >;
  const { caFile, stateDir } = info;
  t.match(info, {
    url: /^https:\/\/127\.0\.0\.1:\d+\/api2\/json$/,
    caFile: /pve-root-ca\.pem$/,
    tokenId: 'kubernetes-csi@pve!csi',
    tokenSecret: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    adminUrl: /^http:\/\/127\.0\.0\.1:\d+$/,
    cluster: 'homelab',
  });
  const agent = new Agent({ connect: { ca: readFileSync(caFile) } });
  const res = await fetch(`${info.url}/nodes`, {
    dispatcher: agent,
    headers: { Authorization: `PVEAPIToken=${info.tokenId}=${info.tokenSecret}` },
  });
  t.equal(res.status, 200);
  t.equal(((await res.json()) as { data: unknown[] }).data.length, 3);
  await agent.close();
  t.ok(existsSync(stateDir));
  child.kill('SIGTERM');
  const [code] = (await once(child, 'exit')) as [number];
  t.equal(code, 0, stderr);
  t.notOk(existsSync(stateDir), 'temp state dir removed');
});

t.test('bad flags exit 2 with usage', async (t) => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'sim/main.ts', '--backend', 'zfs'], {
    cwd: new URL('../..', import.meta.url).pathname,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, 'exit')) as [number];
  t.equal(code, 2);
  t.match(stderr, /--backend: none, loop or qmp, got 'zfs'/);
});
