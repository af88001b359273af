// The ownership gate cannot be bypassed (docs/ownership.md): in all of src/, the Proxmox API
// methods that free, allocate, resize, re-line, unlink, or create, migrate or destroy a VM are
// called only by the API adapter and the gate's ports (ownership-port.ts, mover-port.ts), which
// take a permit only the gate's decisions make. No file is excepted: the day-2 commands
// (report --fix, move) go through the gate too. The types hold it as well: the API the rest of
// src sees is read-only (the @ts-expect-error lines below fail typecheck the day a mutating
// method becomes reachable there), and a permit cannot be made outside the gate's modules.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster } from '../../../../../src/proxmox/controller/state/cluster.js';
import type { MoverReadApi } from '../../../../../src/proxmox/mover-vm.js';
import type { ProxmoxInspect } from '../../../../../src/proxmox/controller/controller.js';
import type { OwnershipPermit } from '../../../../../src/proxmox/controller/safety/permit.js';
import type { OwnershipPort } from '../../../../../src/proxmox/controller/safety/ownership-port.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../..');
const SRC = path.join(ROOT, 'src');
const MUTATING = [
  'freeDisk',
  'allocDisk',
  'resizeDisk',
  'updateVmConfig',
  'unlinkDisks',
  'createVm',
  'destroyVm',
  'migrateVm',
  // a thin copy's helper VMs (copy-vms.ts)
  'snapshotVm',
  'deleteVmSnapshot',
  'linkedClone',
  'reassignDisk',
];
/** The adapter implements them; the ports are the gate's only way out. */
const GATE = [
  'proxmox/api/http-api.ts',
  'proxmox/controller/safety/ownership-port.ts',
  'proxmox/controller/safety/mover-port.ts',
];
/** The gate's decision modules: the only importers of the permit's constructor. */
const DECIDERS = ['proxmox/controller/safety/ownership-day2.ts', 'proxmox/controller/safety/ownership.ts'];

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return p === path.join(SRC, 'gen') ? [] : sources(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

const strip = (code: string) => code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

/**
 * `file: method` for each call of a mutating API method on anything but an ownership port (a
 * call on `port` needs the gate's permit to typecheck: the last test); comments stripped.
 */
export function callsOf(file: string, code: string): string[] {
  const out: string[] = [];
  for (const m of strip(code).matchAll(new RegExp(`(\\bport\\s*)?\\.(${MUTATING.join('|')})\\s*\\(`, 'g')))
    if (!m[1]) out.push(`${file}: ${m[2]}`);
  return out;
}

t.test('only the adapter and the ownership ports call the mutating Proxmox API methods, in all of src', async (t) => {
  const calls = sources(SRC).flatMap((f) => callsOf(path.relative(SRC, f), fs.readFileSync(f, 'utf8')));
  for (const port of GATE.slice(1))
    t.ok(
      calls.some((c) => c.startsWith(`${port}:`)),
      `the scan finds ${port}’s calls of the API`,
    );
  const bad = calls.filter((c) => !GATE.some((f) => c.startsWith(`${f}:`)));
  t.same(bad, [], 'no other file calls them: no exceptions');
});

t.test('the scan sees what it forbids', async (t) => {
  t.same(callsOf('x.ts', 'await cluster.api.freeDisk(n, s, v);\n// api.resizeDisk(…)\n'), ['x.ts: freeDisk']);
  t.same(callsOf('x.ts', 'this.o.api .unlinkDisks (a)'), ['x.ts: unlinkDisks']);
  t.same(callsOf('x.ts', 'await api.migrateVm(n, 9999, "hyper2")'), ['x.ts: migrateVm']);
  t.same(callsOf('x.ts', 'await cluster.port.freeDisk(permit)'), [], 'a call through the port is gated');
});

t.test('a permit is made only by the gate', async (t) => {
  const code = fs.readFileSync(path.join(SRC, 'proxmox/controller/safety/permit.ts'), 'utf8');
  t.match(code, /private constructor\(/, 'OwnershipPermit has a private constructor');
  t.match(code, /readonly #kind/, 'and a #private member: no structural look-alike is assignable');
  const minting = sources(SRC)
    .filter((f) => /\bmintPermit\b|new OwnershipPermit\b/.test(strip(fs.readFileSync(f, 'utf8'))))
    .map((f) => path.relative(SRC, f))
    .sort();
  t.same(minting, [...DECIDERS, 'proxmox/controller/safety/permit.ts'], 'minted in the decision modules only');
});

t.test('the API outside the ports is read-only by type', async (t) => {
  // Compile-time checks (tsc over test/): each line below must stay a type error.
  const probe = (
    c: Cluster,
    m: MoverReadApi,
    i: ProxmoxInspect,
    port: OwnershipPort,
    p: OwnershipPermit<'free'>,
  ): unknown[] => [
    // @ts-expect-error Cluster.api has no mutating method
    c.api.freeDisk,
    // @ts-expect-error Cluster.api has no mutating method
    c.api.updateVmConfig,
    // @ts-expect-error the move's API has no VM lifecycle change
    m.destroyVm,
    // @ts-expect-error nor a free
    m.freeDisk,
    // @ts-expect-error the metrics' view of the controller is read-only
    i.clusters.get('x')?.api.unlinkDisks,
    // @ts-expect-error a permit of one kind does not open another call
    port.freeLeftover(p),
    // @ts-expect-error the port takes a permit, not the call's arguments
    port.freeDisk('hyper1', 'local-lvm', 'local-lvm:vm-9999-pvc-x'),
  ];
  t.equal(typeof probe, 'function');
});
