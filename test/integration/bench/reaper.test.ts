// Servers a bench starts outside its own process end with the bench, however it ends: killed
// with SIGKILL, the harness runs none of its clean-up, and its watcher (test/harness/reaper.sh)
// stops ganesha and kills the server's process group. If the watcher is killed too, the next
// harness to start sweeps the registry the dead one left. Before, the ganesha that bench/rss.ts
// started and the program under test kept running after the bench was killed.
import t from 'tap';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../../helpers/temp-dir.js';
import type { Teardown } from '../../helpers/teardown.js';

const HARNESS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'harness.ts');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Started {
  ganeshaPid: number;
  serverPid: number;
  watcherPid: number;
}

const alive = (pid: number) => {
  try {
    return !fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
};

async function gone(pids: number[], ms: number): Promise<number[]> {
  const until = Date.now() + ms;
  while (Date.now() < until && pids.some(alive)) await sleep(100);
  return pids.filter(alive);
}

/** A harness with its registries in `registries`; resolves once its servers run. */
async function harness(t: Teardown, registries: string) {
  const dir = tempDir(t, 'bench-harness-');
  const child = spawn(process.execPath, ['--import=tsx', HARNESS, dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, PVE_NFS_CSI_REAPER_DIR: registries },
  });
  let out = '';
  const started = await new Promise<Started>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve(JSON.parse(line) as Started);
    });
    child.once('exit', (code) => reject(new Error(`harness exited (${String(code)}) before its servers ran: ${out}`)));
  });
  // If an assertion fails, nothing of this test is left running either.
  t.teardown(() => {
    for (const pid of [started.serverPid, started.ganeshaPid, child.pid ?? 0])
      try {
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
  });
  return { child, dir, ...started };
}

t.test('SIGKILL of a bench harness: its ganesha and its server process end with it', async (t) => {
  const registries = tempDir(t, 'reaper-');
  const h = await harness(t, registries);
  t.ok(alive(h.ganeshaPid) && alive(h.serverPid), 'ganesha and the server run');
  h.child.kill('SIGKILL');
  t.same(await gone([h.ganeshaPid, h.serverPid], 15_000), [], 'both ended after the harness was killed');
  t.notOk(fs.existsSync(path.join(h.dir, 'ganesha')), "ganesha's directory removed (scripts/ganesha.sh stop)");
  t.same(await gone([h.watcherPid], 5_000), [], 'the watcher ended too');
  t.same(fs.readdirSync(registries), [], 'no registry left');
});

t.test('harness and watcher both killed: the next harness to start sweeps what they left', async (t) => {
  const registries = tempDir(t, 'reaper-');
  const h = await harness(t, registries);
  process.kill(h.watcherPid, 'SIGKILL');
  h.child.kill('SIGKILL');
  await sleep(1000);
  t.ok(alive(h.ganeshaPid) && alive(h.serverPid), 'left running with no watcher');
  const next = await harness(t, registries);
  t.same(await gone([h.ganeshaPid, h.serverPid], 15_000), [], "the next harness's start stopped them");
  t.ok(alive(next.ganeshaPid) && alive(next.serverPid), "and left the next harness's own alone");
  next.child.kill('SIGKILL');
  t.same(await gone([next.ganeshaPid, next.serverPid], 15_000), []);
});
