// A closed simulator lets its process end: the injected latency, task durations and lock waits
// of requests still in flight are simulated time and keep nothing alive. A test that closes its
// simulator with a 60 s latency request in flight used to wait out the minute at exit
// (test/integration/server/main.test.ts took 62 s for 6 s of subtests).
import t from 'tap';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/close-with-latency.ts');

t.test('the process ends promptly after close() with a request in its injected latency', async (t) => {
  const child = spawn(process.execPath, ['--import=tsx', FIXTURE], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  let closedAt = 0;
  child.stdout.on('data', () => (closedAt ||= out.includes('closed') ? Date.now() : 0));
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  clearTimeout(killer);
  t.equal(code, 0, `exited by itself (output: ${out.trim()})`);
  t.ok(closedAt > 0, 'the simulator closed');
  const after = Date.now() - closedAt;
  t.ok(after < 5_000, `ended ${after} ms after close()`);
});
