// The NFSv3 client and NfsStore against a real nfs-ganesha on 127.0.0.1. Results are checked
// on the exported directory itself. The last tests stop and kill the server.
import t from 'tap';
import fs from 'node:fs/promises';
import path from 'node:path';
import { createNfs3Stores } from '../../../src/nfs/controller/store/nfs3-store.js';
import { ownership as own, startTalosExport } from '../../helpers/ganesha-export.js';
import { outcomeText as kindOf } from '../../helpers/outcome.js';
import { startRpcCounter } from '../../helpers/rpc-counter.js';

const { g, talos: TALOS, onDisk, mode } = await startTalosExport(t);
const stores = createNfs3Stores({ timeoutMs: 3000, nfsPort: g.nfsPort, mountPort: g.mountPort, privilegedPort: true });
t.teardown(() => stores.close());
const store = stores.open(g.server, TALOS);

t.test('ensureDir creates parents and sets mode and owner; repeating it converges', async (t) => {
  const st = await store.ensureDir('ns1/data', { mode: 0o2770, uid: 1000, gid: 2000 });
  t.same(own(st), { type: 'dir', mode: 0o2770, uid: 1000, gid: 2000 });
  const disk = await fs.stat(onDisk('ns1/data'));
  t.equal(disk.mode & 0o7777, 0o2770);
  t.equal(disk.uid, 1000);
  t.equal(disk.gid, 2000);
  t.equal(await mode('ns1'), 0o755, 'parent 0755');
  t.equal((await fs.stat(onDisk('ns1'))).uid, 0, 'parent owned by root');

  await fs.chmod(onDisk('ns1/data'), 0o700);
  await fs.chown(onDisk('ns1/data'), 5, 5);
  t.same(
    own(await store.ensureDir('ns1/data', { mode: 0o2770, uid: 1000, gid: 2000 })),
    own(st),
    'drifted attributes are put back',
  );
  t.same(own(await store.ensureDir('ns1/data', {})), own(st), 'no attributes: existing directory left as is');
  t.same(own(await store.ensureDir('fresh', {})), { type: 'dir', mode: 0o755, uid: 0, gid: 0 }, 'default mode 0755');
});

t.test('ensureDir errors are typed', async (t) => {
  await fs.writeFile(onDisk('a-file'), 'x');
  t.match(
    await kindOf(store.ensureDir('a-file', {})),
    /^FailedPrecondition: 127\.0\.0\.1:\/volume1\/k8s-volumes\/talos\/a-file exists and is a file/,
  );
  t.match(await kindOf(store.ensureDir('a-file/sub', {})), /^FailedPrecondition/);
  t.match(
    await kindOf(store.ensureDir('n'.repeat(300), {})),
    /^InvalidArgument: NFS (LOOKUP|MKDIR) .*NFS3ERR_NAMETOOLONG/,
  );
  t.match(await kindOf(store.ensureDir('../x', {})), /^InvalidArgument/);
  t.match(await kindOf(store.ensureDir('', {})), /^InvalidArgument: refusing to modify the share root/);
});

t.test('stat, list and statfs', async (t) => {
  await store.ensureDir('listme/a', {});
  await store.ensureDir('listme/b', {});
  await fs.writeFile(onDisk('listme/f'), 'x');
  await fs.symlink('/etc', onDisk('listme/l'));
  const entries = (await store.list('listme')).sort((x, y) => x.name.localeCompare(y.name));
  t.same(entries, [
    { name: 'a', type: 'dir' },
    { name: 'b', type: 'dir' },
    { name: 'f', type: 'file' },
    { name: 'l', type: 'symlink' },
  ]);
  t.equal(await store.stat('listme/missing'), null);
  // size, mtime and ctime as the server has them (archives' age and size: report, archives)
  const f = await store.stat('listme/f');
  const disk = await fs.stat(onDisk('listme/f'));
  t.equal(f?.size, 1, "a file's size");
  t.equal(Math.floor((f?.mtimeMs ?? 0) / 1000), Math.floor(disk.mtimeMs / 1000), 'mtime');
  t.equal(Math.floor((f?.ctimeMs ?? 0) / 1000), Math.floor(disk.ctimeMs / 1000), 'ctime');
  t.equal(await store.stat('listme/f/below-a-file'), null);
  t.equal((await store.stat('listme/l'))?.type, 'symlink', 'symlinks are not followed');
  t.match(
    await kindOf(store.list('nope')),
    /^NotFound: 127\.0\.0\.1:\/volume1\/k8s-volumes\/talos\/nope does not exist/,
  );

  const fsst = await store.statfs();
  const local = await fs.statfs(g.exportDir);
  t.equal(fsst.totalBytes, local.blocks * local.bsize, 'FSSTAT total matches the exported file system');
  t.ok(fsst.availBytes > 0 && fsst.availBytes <= fsst.totalBytes);
});

t.test('removeTree deletes a deep tree (paged listings) and never follows symlinks', async (t) => {
  const outside = path.join(g.exportDir, 'outside');
  await fs.mkdir(outside, { recursive: true });
  await fs.writeFile(path.join(outside, 'precious'), 'keep me');
  const vol = onDisk('ns2/vol');
  await fs.mkdir(path.join(vol, 'a/b/c'), { recursive: true });
  await Promise.all(
    Array.from({ length: 700 }, (_, i) => fs.writeFile(path.join(vol, `file-${i}-${'x'.repeat(40)}`), String(i))),
  );
  await fs.writeFile(path.join(vol, 'a/b/c/deep'), 'x');
  await fs.symlink(outside, path.join(vol, 'link-to-outside'));
  await fs.symlink(outside, path.join(vol, 'a/link2'));
  await fs.mkdir(path.join(vol, 'ro'));
  await fs.writeFile(path.join(vol, 'ro/f'), 'x');
  await fs.chmod(path.join(vol, 'ro'), 0o555);
  await fs.mkdir(onDisk('ns2/sibling'));

  t.equal(await store.removeTree('ns2/vol'), true);
  await t.rejects(fs.lstat(vol), { code: 'ENOENT' });
  t.equal(await fs.readFile(path.join(outside, 'precious'), 'utf8'), 'keep me', 'symlink target untouched');
  t.ok(await fs.stat(onDisk('ns2/sibling')), 'sibling untouched');
  t.equal(await store.removeTree('ns2/vol'), false, 'again: nothing there');
  t.equal(await store.removeTree('ns2/missing/deeper'), false);

  // The ownership gate (ownership.ts): only a directory is a claim.
  await fs.writeFile(onDisk('ns2/plainfile'), 'x');
  t.match(await kindOf(store.removeTree('ns2/plainfile')), /^FailedPrecondition: .*is a file, not a claim directory/);
  t.equal(await fs.readFile(onDisk('ns2/plainfile'), 'utf8'), 'x', 'a file is left alone');
});

// The ownership gate reads the share's attributes and LOOKUPs the path first (ownership.ts): one
// GETATTR and one LOOKUP per segment more than the change itself needs; before a delete it also
// walks the claim for another file system or export (one READDIRPLUS for an empty one).
t.test('round trips on the wire: create 5, delete of an empty claim 6, never through a symlink', async (t) => {
  const relay = await startRpcCounter(g.nfsPort);
  t.teardown(() => relay.close());
  const counted = createNfs3Stores({
    timeoutMs: 3000,
    nfsPort: relay.port,
    mountPort: g.mountPort,
    privilegedPort: true,
  });
  t.teardown(() => counted.close());
  const cs = counted.open(g.server, TALOS);
  await cs.ensureDir('rt', { mode: 0o755 });
  const ops = () => {
    const r = Object.fromEntries(relay.counts());
    relay.reset();
    return r;
  };
  ops();
  await cs.ensureDir('rt/vol', { mode: 0o770, uid: 1000, gid: 1000 });
  t.same(ops(), { GETATTR: 1, LOOKUP: 3, MKDIR: 1 }, 'create: the gate, LOOKUP the parent, MKDIR with mode and owner');
  t.equal(await cs.removeTree('rt/vol'), true);
  t.same(
    ops(),
    { GETATTR: 1, LOOKUP: 3, READDIRPLUS: 1, RMDIR: 1 },
    'empty claim: the gate and its walk, LOOKUP the parent, RMDIR',
  );
  await t.rejects(fs.lstat(onDisk('rt/vol')), { code: 'ENOENT' });

  await fs.mkdir(onDisk('rt/full/sub'), { recursive: true });
  t.equal(await cs.removeTree('rt/full'), true, 'not empty: walked after RMDIR says so');
  await t.rejects(fs.lstat(onDisk('rt/full')), { code: 'ENOENT' });

  const outside = onDisk('rt-outside');
  await fs.mkdir(outside, { recursive: true });
  await fs.symlink(outside, onDisk('rt/link'));
  t.match(await kindOf(cs.removeTree('rt/link')), /^FailedPrecondition: .*is a symbolic link/);
  t.ok((await fs.lstat(onDisk('rt/link'))).isSymbolicLink(), 'a symlink is not a claim: left alone');
  t.ok((await fs.stat(outside)).isDirectory(), 'its target stays');
});

t.test('removeDirIfEmpty and rename without replacing', async (t) => {
  await store.ensureDir('ns3/vol', {});
  await fs.writeFile(onDisk('ns3/vol/data'), 'x');
  t.equal(await store.removeDirIfEmpty('ns3'), 'not-empty');
  t.equal(await store.removeDirIfEmpty('ns3/none'), 'missing');

  await store.rename('ns3/vol', 'archived-ns3/vol');
  t.equal(await fs.readFile(onDisk('archived-ns3/vol/data'), 'utf8'), 'x', 'moved with its data, parent created');
  t.equal(await store.removeDirIfEmpty('ns3'), 'removed');
  await t.rejects(fs.stat(onDisk('ns3')), { code: 'ENOENT' });

  await store.ensureDir('ns3/vol', {});
  await fs.mkdir(onDisk('empty-target'));
  t.match(
    await kindOf(store.rename('ns3/vol', 'empty-target')),
    /^AlreadyExists: .*empty-target already exists/,
    'even an empty directory is not replaced',
  );
  t.match(await kindOf(store.rename('ns3/vol', 'archived-ns3/vol')), /^AlreadyExists/);
  t.match(await kindOf(store.rename('ns3/gone', 'elsewhere')), /^NotFound: .*ns3\/gone does not exist/);
  t.ok(await fs.stat(onDisk('ns3/vol')), 'source still there after refused renames');
});

t.test('a share below the export works; a missing share is FailedPrecondition', async (t) => {
  const top = stores.open(g.server, g.share);
  t.equal((await top.stat('talos'))?.type, 'dir');
  t.match(
    await kindOf(stores.open(g.server, '/volume1/k8s-volumes/nope').ensureDir('x', {})),
    /^FailedPrecondition: NFS server 127\.0\.0\.1 has no exported directory \/volume1\/k8s-volumes\/nope/,
  );
  t.match(await kindOf(stores.open(g.server, '/not-exported').stat('x')), /^FailedPrecondition/);
});

t.test('a stale share handle is re-mounted once', async (t) => {
  const sub = stores.open(g.server, `${g.share}/replaced`);
  await fs.mkdir(path.join(g.exportDir, 'replaced'));
  await sub.ensureDir('before', {});
  // The share directory is replaced behind the client's back: its cached handle goes stale.
  await fs.rm(path.join(g.exportDir, 'replaced'), { recursive: true });
  await fs.mkdir(path.join(g.exportDir, 'replaced'));
  await sub.ensureDir('after', {});
  t.ok(await fs.stat(path.join(g.exportDir, 'replaced/after')));
});

t.test('parallel ensureDir on shared parents all succeed', async (t) => {
  const names = Array.from({ length: 40 }, (_, i) => `par/ns-${i % 4}/v-${i}`);
  await Promise.all(names.map((n) => store.ensureDir(n, { mode: 0o770 })));
  for (const n of names) t.equal(await mode(n), 0o770);
});

/** Until every thread of `pid` is stopped (state T in /proc/<pid>/task/<tid>/stat), 5 s at most. */
async function allStopped(pid: number): Promise<void> {
  const end = Date.now() + 5000;
  for (;;) {
    const tasks = await fs.readdir(`/proc/${pid}/task`);
    const states = await Promise.all(
      tasks.map(async (tid) => (await fs.readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8')).replace(/^.*\) /s, '')[0]),
    );
    if (states.every((st) => st === 'T' || st === 't')) return;
    if (Date.now() > end) throw new Error(`ganesha ${pid} did not stop: thread states ${states.join('')}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

t.test('a stopped server is Unavailable within the call timeout; it recovers', async (t) => {
  const quick = createNfs3Stores({ timeoutMs: 800, nfsPort: g.nfsPort, mountPort: g.mountPort });
  t.teardown(() => quick.close());
  const s = quick.open(g.server, TALOS);
  await s.ensureDir('hang', {});
  const pid = Number(await fs.readFile(g.pidFile, 'utf8'));
  process.kill(pid, 'SIGSTOP');
  t.teardown(() => {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // ganesha is gone already: nothing to resume.
    }
  });
  // kill() returns before every thread has stopped: a thread still running on the other core
  // answered the LOOKUP now and then on a loaded machine. Wait for each thread's state T.
  await allStopped(pid);
  const t0 = Date.now();
  t.match(
    await kindOf(s.stat('hang')),
    /^Unavailable: NFS server 127\.0\.0\.1:\d+ did not answer LOOKUP within 800 ms/,
  );
  const took = Date.now() - t0;
  t.ok(took < 800 + 700, `Unavailable after ${took} ms (timeout 800 ms, slack for a loaded machine)`);
  process.kill(pid, 'SIGCONT');
  t.equal((await s.stat('hang'))?.type, 'dir', 'next call reconnects');
});

t.test('a killed server is Unavailable at once; after a restart the client reconnects', async (t) => {
  const quick = createNfs3Stores({ timeoutMs: 1000, nfsPort: g.nfsPort, mountPort: g.mountPort });
  t.teardown(() => quick.close());
  const s = quick.open(g.server, TALOS);
  await s.ensureDir('kill', {});
  process.kill(Number(await fs.readFile(g.pidFile, 'utf8')), 'SIGKILL');
  await new Promise((r) => setTimeout(r, 100));
  const t0 = Date.now();
  t.match(await kindOf(s.ensureDir('kill/x', {})), /^Unavailable: /);
  t.ok(Date.now() - t0 < 1000 + 500, `Unavailable after ${Date.now() - t0} ms`);
  t.match(await kindOf(s.stat('kill')), /^Unavailable/, 'still down');

  await g.restart();
  t.equal((await s.stat('kill'))?.type, 'dir', 'same store works after the restart');
  await s.ensureDir('kill/after-restart', {});
  t.ok(await fs.stat(onDisk('kill/after-restart')));
});
