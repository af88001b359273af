// The tree copy over NFSv3 against a real nfs-ganesha: a copy of a tree with every kind of entry
// and odd attribute equals its source in type, mode, owner, group, size, content, symlink
// target, hard-link groups and exact atime/mtime; the gate's rules for a copy hold.
import t from 'tap';
import fs from 'node:fs/promises';
import { createNfs3Stores } from '../../../src/nfs/controller/store/nfs3-store.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';
import { outcomeText as kindOf } from '../../helpers/outcome.js';
import { buildTree, describeTree, restoreTimes, settable } from './tree-meta.js';

const { g, talos: TALOS, onDisk } = await startTalosExport(t);
const stores = createNfs3Stores({ timeoutMs: 5000, nfsPort: g.nfsPort, mountPort: g.mountPort, privilegedPort: true });
t.teardown(() => stores.close());
const store = stores.open(g.server, TALOS);

t.test('a copy keeps every entry and attribute exactly', async (t) => {
  await fs.mkdir(onDisk('claim'), { recursive: true });
  await buildTree(onDisk('claim'));
  await fs.chmod(onDisk('claim'), 0o2775);
  await fs.chown(onDisk('claim'), 1000, 2000);
  const want = await describeTree(onDisk('claim'), true);
  restoreTimes(onDisk('claim'), want);
  const progress: number[] = [];
  const stats = await store.copyTree('claim', 'snapshots/.tmp-s1/data', { progress: (s) => progress.push(s.files) });
  t.match(stats, { files: 7, hardLinks: 2, symlinks: 3, specials: 1 });
  t.ok(stats.bytes > 300 * 1024, 'all bytes counted');
  t.ok(progress.length >= 1, 'progress reported at the end');
  const got = await describeTree(onDisk('snapshots/.tmp-s1/data'), true);
  t.same(settable(got), settable(want));
});

t.test('a copy never lands on something that exists, nor inside itself', async (t) => {
  await fs.mkdir(onDisk('c2/x'), { recursive: true });
  await fs.mkdir(onDisk('taken'), { recursive: true });
  t.match(await kindOf(store.copyTree('c2', 'taken')), /^AlreadyExists/);
  t.match(await kindOf(store.copyTree('c2', 'c2/x/y')), /^FailedPrecondition: refusing to copy/);
  t.match(await kindOf(store.copyTree('nothing-here', 'z')), /^NotFound/);
  await fs.symlink('c2', onDisk('c2-link'));
  t.match(await kindOf(store.copyTree('c2-link', 'z')), /^FailedPrecondition: .*symbolic link/);
  await t.rejects(fs.stat(onDisk('z')), 'nothing made');
});
