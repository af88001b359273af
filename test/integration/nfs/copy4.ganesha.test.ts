// The tree copy over NFSv4.1 against a real nfs-ganesha that serves NFSv4 only: a copy of a tree
// with every kind of entry and odd attribute equals its source exactly, as the NFSv3 copy's does
// (copy.ganesha.test.ts); the gate's rules for a copy hold; NFSv4.0's OPEN state works too.
import t from 'tap';
import fs from 'node:fs/promises';
import { createNfs4Stores } from '../../../src/nfs/controller/store/nfs4-store.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';
import { outcomeText as kindOf } from '../../helpers/outcome.js';
import { buildTree, describeTree, restoreTimes, settable } from './tree-meta.js';

const { g, talos: TALOS, onDisk } = await startTalosExport(t, { v4only: true });
const stores = createNfs4Stores({ timeoutMs: 5000, nfsPort: g.nfsPort, minor: 1 });
t.teardown(() => stores.close());
const store = stores.open(g.server, TALOS);

t.test('an NFSv4.1 copy keeps every entry and attribute exactly', async (t) => {
  await fs.mkdir(onDisk('claim'), { recursive: true });
  await buildTree(onDisk('claim'));
  await fs.chmod(onDisk('claim'), 0o2775);
  await fs.chown(onDisk('claim'), 1000, 2000);
  const want = await describeTree(onDisk('claim'), true);
  restoreTimes(onDisk('claim'), want);
  const progress: number[] = [];
  const stats = await store.copyTree('claim', 'snapshots/s1/tree', { progress: (s) => progress.push(s.files) });
  t.match(stats, { files: 7, hardLinks: 2, symlinks: 3, specials: 1 });
  t.ok(stats.bytes > 300 * 1024, 'all bytes counted');
  t.ok(progress.length >= 1, 'progress reported at the end');
  const got = await describeTree(onDisk('snapshots/s1/tree'), true);
  t.same(settable(got), settable(want));
});

t.test('over NFSv4.2 a server that neither CLONEs nor COPYs gets the same copy from the client', async (t) => {
  // ganesha 4.3 (FSAL_VFS) takes 4.2 COMPOUNDs and answers CLONE and COPY with NFS4ERR_NOTSUPP.
  const v42 = createNfs4Stores({ timeoutMs: 5000, nfsPort: g.nfsPort });
  t.teardown(() => v42.close());
  const s42 = v42.open(g.server, TALOS);
  await fs.mkdir(onDisk('claim42'), { recursive: true });
  await buildTree(onDisk('claim42'));
  const want = await describeTree(onDisk('claim42'), true);
  restoreTimes(onDisk('claim42'), want);
  const first = await s42.copyTree('claim42', 'snapshots/s42/tree');
  t.match(first, { files: 7, hardLinks: 2, symlinks: 3, specials: 1, cloned: 0, serverCopied: 0 });
  t.same(settable(await describeTree(onDisk('snapshots/s42/tree'), true)), settable(want));
  // What the server refused is remembered: the second copy asks nothing it was told no to.
  restoreTimes(onDisk('claim42'), want); // the first copy's reads moved the source's atimes
  const second = await s42.copyTree('claim42', 'snapshots/s42b/tree');
  t.match(second, { files: 7, cloned: 0, serverCopied: 0 });
  t.same(settable(await describeTree(onDisk('snapshots/s42b/tree'), true)), settable(want));
});

t.test('an NFSv4.1 copy never lands on something that exists, nor inside itself', async (t) => {
  await fs.mkdir(onDisk('c2/x'), { recursive: true });
  await fs.mkdir(onDisk('taken'), { recursive: true });
  t.match(await kindOf(store.copyTree('c2', 'taken')), /^AlreadyExists/);
  t.match(await kindOf(store.copyTree('c2', 'c2/x/y')), /^FailedPrecondition: refusing to copy/);
  t.match(await kindOf(store.copyTree('nothing-here', 'z')), /^NotFound/);
  await fs.symlink('c2', onDisk('c2-link'));
  t.match(await kindOf(store.copyTree('c2-link', 'z')), /^FailedPrecondition: .*symbolic link/);
  await t.rejects(fs.stat(onDisk('z')), 'nothing made');
});

t.test('an NFSv4.0 copy keeps every entry and attribute exactly, its open-owners reused', async (t) => {
  // NFSv4.0's OPEN needs a confirmed client id (SETCLIENTID) and per-owner seqids with
  // OPEN_CONFIRM for a new owner: a copy with its slots in parallel exercises both.
  const v40 = createNfs4Stores({ timeoutMs: 5000, nfsPort: g.nfsPort, minor: 0 });
  t.teardown(() => v40.close());
  const s40 = v40.open(g.server, TALOS);
  await fs.mkdir(onDisk('c40'), { recursive: true });
  await buildTree(onDisk('c40'));
  await fs.chown(onDisk('c40'), 1000, 2000);
  const want = await describeTree(onDisk('c40'), true);
  restoreTimes(onDisk('c40'), want);
  const first = await s40.copyTree('c40', 'snapshots/s40/tree');
  t.match(first, { files: 7, hardLinks: 2, symlinks: 3, specials: 1, cloned: 0, serverCopied: 0 });
  t.same(settable(await describeTree(onDisk('snapshots/s40/tree'), true)), settable(want));
  restoreTimes(onDisk('c40'), want);
  const second = await s40.copyTree('c40', 'snapshots/s40b/tree');
  t.match(second, { files: 7 });
  t.same(settable(await describeTree(onDisk('snapshots/s40b/tree'), true)), settable(want));
  t.match(await kindOf(s40.copyTree('c40', 'snapshots/s40b/tree')), /^AlreadyExists/, 'a taken target still refused');
});
