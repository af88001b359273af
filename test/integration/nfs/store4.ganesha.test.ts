// The NFSv4 client and NfsStore against a real nfs-ganesha that serves NFSv4 only (no rpcbind,
// no MOUNT, like a hardened NAS): 4.1 with a session and 4.0 without, the version chosen from
// mount options or found out (v3 first, v4 when there is no v3), and a restart that loses the
// session. Results are checked on the exported directory itself.
import t from 'tap';
import fs from 'node:fs/promises';
import path from 'node:path';
import { createNfs4Stores } from '../../../src/nfs/controller/store/nfs4-store.js';
import { createNfsStores, nfsVersionOf } from '../../../src/nfs/controller/store/stores.js';
import { ownership as own, startTalosExport } from '../../helpers/ganesha-export.js';
import { outcomeText as kindOf } from '../../helpers/outcome.js';

const { g, talos: TALOS, onDisk, mode } = await startTalosExport(t, { v4only: true });
t.test('mount options choose the version as mount.nfs reads them', async (t) => {
  t.equal(nfsVersionOf([]), undefined);
  t.equal(nfsVersionOf(['hard', 'nfsvers=4.1']), '4.1');
  t.equal(nfsVersionOf(['vers=4.2']), '4.2');
  t.equal(nfsVersionOf(['nfsvers=4.3']), '4.2', 'the newest there is');
  t.equal(nfsVersionOf(['nfsvers=4.0']), '4.0');
  t.equal(nfsVersionOf(['vers=4']), '4');
  t.equal(nfsVersionOf(['nfsvers=3,nolock']), '3');
  t.equal(nfsVersionOf(['nfsvers=3', 'nfsvers=4']), '4', 'the last one wins');
});

for (const minor of [2, 1, 0] as const) {
  t.test(`NFSv4.${minor}: the directory operations the controller needs`, async (t) => {
    const stores = createNfs4Stores({ timeoutMs: 3000, nfsPort: g.nfsPort, minor });
    t.teardown(() => stores.close());
    const store = stores.open(g.server, TALOS);
    const ns = `v4${minor}`;

    const st = await store.ensureDir(`${ns}/data`, { mode: 0o2770, uid: 1000, gid: 2000 });
    t.same(own(st), { type: 'dir', mode: 0o2770, uid: 1000, gid: 2000 }, 'numeric owner strings accepted');
    const disk = await fs.stat(onDisk(`${ns}/data`));
    t.same([disk.mode & 0o7777, disk.uid, disk.gid], [0o2770, 1000, 2000]);
    t.equal(await mode(ns), 0o755, 'parent 0755');
    await fs.chmod(onDisk(`${ns}/data`), 0o700);
    await fs.chown(onDisk(`${ns}/data`), 5, 5);
    t.same(
      own(await store.ensureDir(`${ns}/data`, { mode: 0o2770, uid: 1000, gid: 2000 })),
      own(st),
      'drift put back by SETATTR',
    );
    t.same(own(await store.ensureDir(`${ns}/fresh`, {})), { type: 'dir', mode: 0o755, uid: 0, gid: 0 });

    await fs.writeFile(onDisk(`${ns}/a-file`), 'x');
    t.match(await kindOf(store.ensureDir(`${ns}/a-file`, {})), /^FailedPrecondition: .*a-file exists and is a file/);
    t.match(
      await kindOf(store.ensureDir('n'.repeat(300), {})),
      /^InvalidArgument: NFSv4 (LOOKUP|CREATE).*NFS4ERR_NAMETOOLONG/,
    );
    t.match(await kindOf(store.ensureDir('', {})), /^InvalidArgument/);

    await fs.symlink('/etc', onDisk(`${ns}/l`));
    t.same(
      (await store.list(ns)).sort((a, b) => a.name.localeCompare(b.name)),
      [
        { name: 'a-file', type: 'file' },
        { name: 'data', type: 'dir' },
        { name: 'fresh', type: 'dir' },
        { name: 'l', type: 'symlink' },
      ],
    );
    t.equal(await store.stat(`${ns}/missing`), null);
    t.equal(await store.stat(`${ns}/a-file/below`), null);
    // SIZE, TIME_METADATA, TIME_MODIFY (archives' size and age: report, archives)
    const f = await store.stat(`${ns}/a-file`);
    const onHost = await fs.stat(onDisk(`${ns}/a-file`));
    t.equal(f?.size, 1, "a file's size");
    t.equal(Math.floor((f?.mtimeMs ?? 0) / 1000), Math.floor(onHost.mtimeMs / 1000), 'mtime');
    t.equal(Math.floor((f?.ctimeMs ?? 0) / 1000), Math.floor(onHost.ctimeMs / 1000), 'ctime');
    t.match(await kindOf(store.list(`${ns}/nope`)), /^NotFound: .*nope does not exist/);
    const fsst = await store.statfs();
    const local = await fs.statfs(g.exportDir);
    t.equal(fsst.totalBytes, local.blocks * local.bsize, "space_total is the exported file system's");

    // rename never replaces, creates the target's parents
    await fs.writeFile(onDisk(`${ns}/data/keep`), 'x');
    await store.rename(`${ns}/data`, `archived-${ns}/data`);
    t.equal(await fs.readFile(onDisk(`archived-${ns}/data/keep`), 'utf8'), 'x');
    await store.ensureDir(`${ns}/data`, {});
    t.match(await kindOf(store.rename(`${ns}/data`, `archived-${ns}/data`)), /^AlreadyExists/);
    t.match(await kindOf(store.rename(`${ns}/gone`, 'x')), /^NotFound/);

    // removeTree: a deep tree over several READDIR pages, symlinks removed, never followed
    const outside = path.join(g.exportDir, `outside-${ns}`);
    await fs.mkdir(outside);
    await fs.writeFile(path.join(outside, 'precious'), 'keep me');
    const vol = onDisk(`${ns}/vol`);
    await fs.mkdir(path.join(vol, 'a/b/c'), { recursive: true });
    await Promise.all(
      Array.from({ length: 600 }, (_, i) => fs.writeFile(path.join(vol, `file-${i}-${'x'.repeat(40)}`), String(i))),
    );
    await fs.symlink(outside, path.join(vol, 'a/link'));
    t.equal(await store.removeTree(`${ns}/vol`), true);
    await t.rejects(fs.lstat(vol), { code: 'ENOENT' });
    t.equal(await fs.readFile(path.join(outside, 'precious'), 'utf8'), 'keep me');
    t.equal(await store.removeTree(`${ns}/vol`), false, 'again: nothing there');
    t.equal(await store.removeDirIfEmpty(`archived-${ns}`), 'not-empty');
    t.equal(await store.removeDirIfEmpty(`${ns}/none`), 'missing');
    t.equal(await store.removeDirIfEmpty(`${ns}/fresh`), 'removed');
    t.match(
      await kindOf(stores.open(g.server, '/volume1/k8s-volumes/nope').ensureDir('x', {})),
      /^FailedPrecondition: NFS server 127\.0\.0\.1 has no directory \/volume1\/k8s-volumes\/nope in its NFSv4 namespace/,
    );
    await Promise.all(
      Array.from({ length: 24 }, (_, i) => store.ensureDir(`${ns}/par/p-${i % 3}/v-${i}`, { mode: 0o770 })),
    );
    t.equal(await mode(`${ns}/par/p-2/v-23`), 0o770, "parallel calls share the session's slots");
    await stores.ping();
  });
}

t.test('without a version: NFSv3 is tried, the v4-only server is then spoken to in v4', async (t) => {
  const stores = createNfsStores({ timeoutMs: 2000, nfsPort: g.nfsPort, mountPort: g.mountPort });
  t.teardown(() => stores.close());
  const s = stores.open(g.server, TALOS);
  t.same(own(await s.ensureDir('auto/x', { uid: 7 })), { type: 'dir', mode: 0o755, uid: 7, gid: 0 });
  t.equal((await s.stat('auto/x'))?.type, 'dir');
  await stores.ping();
  const v3 = stores.open(g.server, TALOS, '3');
  t.match(
    await kindOf(v3.stat('auto')),
    /^Unavailable: /,
    'asked for v3 explicitly, the missing service is the answer',
  );
});

t.test('a restarted server: the lost session is replaced and the call succeeds', async (t) => {
  const stores = createNfs4Stores({ timeoutMs: 3000, nfsPort: g.nfsPort, minor: 1 });
  t.teardown(() => stores.close());
  const s = stores.open(g.server, TALOS);
  await s.ensureDir('restart/a', {});
  process.kill(Number(await fs.readFile(g.pidFile, 'utf8')), 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  t.match(await kindOf(s.stat('restart/a')), /^Unavailable: /, 'down');
  await g.restart();
  t.equal((await s.stat('restart/a'))?.type, 'dir', 'same store after the restart');
  await s.ensureDir('restart/b', {});
  t.ok(await fs.stat(onDisk('restart/b')));
});
