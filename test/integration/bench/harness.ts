// A bench harness as reaper.test.ts kills it: it starts what the benches start outside their own
// process, the way they start it (ganesha through test/harness/backends.ts, a server process
// through spawnGuarded as bench/lib/program.ts starts the program), prints their PIDs as one
// JSON line, and idles until killed.
import fs from 'node:fs';
import path from 'node:path';
import { startNfsBackend } from '../../harness/backends.js';
import { spawnGuarded, watcherPid } from '../../harness/reaper.js';

const dir = process.argv[2] ?? '';
await startNfsBackend(dir);
const server = spawnGuarded(process.execPath, ['-e', 'setInterval(() => {}, 1e9)'], { stdio: 'ignore' });
const ganeshaPid = Number(fs.readFileSync(path.join(dir, 'ganesha', 'ganesha.pid'), 'utf8'));
process.stdout.write(`${JSON.stringify({ ganeshaPid, serverPid: server.pid, watcherPid: watcherPid() })}\n`);
setInterval(() => undefined, 1e9);
