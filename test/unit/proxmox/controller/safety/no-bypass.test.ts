// The ownership gate cannot be bypassed (docs/ownership.md): in src/, the Proxmox API methods that
// free, allocate, resize, re-line or unlink are called only by the API adapter and the gate's
// port (ownership-port.ts), which takes a permit only the gate's decisions make. The day-2
// commands that still call the API themselves are listed by name, so a new caller fails here.
// The second half checks that the types hold: a permit cannot be made outside ownership.ts.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../..');
const SRC = path.join(ROOT, 'src');
const MUTATING = [
  'freeDisk',
  'allocDisk',
  'resizeDisk',
  'updateVmConfig',
  'unlinkDisks',
  // a thin copy's helper VMs (copy-vms.ts)
  'createVm',
  'destroyVm',
  'migrateVm',
  'snapshotVm',
  'deleteVmSnapshot',
  'linkedClone',
  'reassignDisk',
];
/** The adapter implements them; the port is the gate's only way out. */
const GATE = ['proxmox/api/http-api.ts', 'proxmox/controller/safety/ownership-port.ts'];
/**
 * Callers outside the controller, each with its own proof of ownership (not this gate's):
 * day-2 commands run by a person.
 */
const DAY2 = ['cli/report/fix.ts', 'cli/move/run.ts', 'proxmox/mover-vm.ts'];

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return p === path.join(SRC, 'gen') ? [] : sources(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/**
 * `file: method` for each call of a mutating method on anything but the ownership port (a call
 * on `port` needs the gate's permit to typecheck); comments stripped.
 */
export function callsOf(file: string, code: string): string[] {
  const stripped = code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const out: string[] = [];
  for (const m of stripped.matchAll(new RegExp(`(\\bport\\s*)?\\.(${MUTATING.join('|')})\\s*\\(`, 'g')))
    if (!m[1]) out.push(`${file}: ${m[2]}`);
  return out;
}

t.test('only the adapter and the ownership port call the mutating Proxmox API methods', async (t) => {
  const calls = sources(SRC).flatMap((f) => callsOf(path.relative(SRC, f), fs.readFileSync(f, 'utf8')));
  t.ok(
    calls.some((c) => c.startsWith('proxmox/controller/safety/ownership-port.ts')),
    'the scan finds the port’s calls of the API',
  );
  const bad = calls.filter((c) => ![...GATE, ...DAY2].some((f) => c.startsWith(`${f}:`)));
  t.same(bad, [], 'no controller file calls them');
  const controller = calls.filter((c) => c.startsWith('proxmox/controller/'));
  t.same(
    [...new Set(controller.map((c) => c.split(':')[0]))],
    ['proxmox/controller/safety/ownership-port.ts'],
    'in the controller: the port alone',
  );
});

t.test('the scan sees what it forbids', async (t) => {
  t.same(callsOf('x.ts', 'await cluster.api.freeDisk(n, s, v);\n// api.resizeDisk(…)\n'), ['x.ts: freeDisk']);
  t.same(callsOf('x.ts', 'this.o.api .unlinkDisks (a)'), ['x.ts: unlinkDisks']);
  t.same(callsOf('x.ts', 'await cluster.port.freeDisk(permit)'), [], 'a call through the port is gated');
});

t.test('a permit is made only by the gate', async (t) => {
  const code = fs.readFileSync(path.join(SRC, 'proxmox/controller/safety/ownership.ts'), 'utf8');
  t.match(code, /private constructor\(/, 'OwnershipPermit has a private constructor');
  t.match(code, /readonly #kind/, 'and a #private member: no structural look-alike is assignable');
  const minted = sources(SRC).filter((f) => /\bmint\(|new OwnershipPermit\b/.test(fs.readFileSync(f, 'utf8')));
  t.same(
    minted.map((f) => path.relative(SRC, f)),
    ['proxmox/controller/safety/ownership.ts'],
    'minted in ownership.ts only',
  );
});
