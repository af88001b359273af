import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { classifyStatError, createLinuxMounter } from '../../../src/os/mounter.js';
import { parseMountinfo } from '../../../src/os/mountinfo.js';
import { isCommandError } from '../../../src/os/exec.js';
import { parseStatFs } from '../../../src/os/statfs.js';
import { FakeSystem, fail, ok, timeout } from './fakes.js';
import { rejection } from '../../helpers/rejection.js';

function tmp(t: { teardown(fn: () => void): void }): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'mounter-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test(
  'parses mountinfo as findmnt printed it: unescaped paths, [fsroot] on bound subtrees, merged options',
  async (t) => {
    const entries = parseMountinfo(
      [
        '29 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro',
        '40 29 7:0 / /a\\040b rw,relatime shared:9 master:2 - ext4 /dev/loop0 rw',
        '41 29 0:6 /loop0 /f rw,nosuid - devtmpfs udev rw,size=4k',
        '42 29 7:0 / /ro ro,relatime - xfs /dev/loop0 rw,nouuid',
        '43 29 7:1 / /sbro rw - ext4 /dev/loop1 ro',
        '44 29 0:50 / /n rw - nfs 127.0.0.1:/export/x rw,vers=3',
        'garbage line',
        '',
      ].join('\n'),
    );
    t.same(entries[1], {
      target: '/a b',
      source: '/dev/loop0',
      fstype: 'ext4',
      options: ['rw', 'relatime'],
      fsroot: '/',
      majMin: '7:0',
    });
    t.equal(entries[2]?.source, 'udev[/loop0]', 'a device node bound onto a file');
    t.equal(entries[2]?.fsroot, '/loop0');
    t.same(entries[2]?.options, ['rw', 'nosuid', 'size=4k']);
    t.same(entries[3]?.options, ['ro', 'relatime', 'nouuid'], 'read-only per mount');
    t.same(entries[4]?.options, ['ro'], 'read-only superblock');
    t.equal(entries[5]?.source, '127.0.0.1:/export/x');
    t.equal(entries.length, 6, 'unreadable lines skipped');
    t.same(parseMountinfo(''), []);
  },
);

t.test('reads the real mount table: / is mounted', async (t) => {
  const m = createLinuxMounter({ exec: new FakeSystem() });
  t.ok((await m.list()).some((e) => e.target === '/'));
});

t.test('find returns the topmost mount at exactly the path, resolving parent symlinks', async (t) => {
  const dir = tmp(t);
  fs.mkdirSync(path.join(dir, 'real'));
  fs.symlinkSync(path.join(dir, 'real'), path.join(dir, 'link'));
  const sys = new FakeSystem();
  sys.addMount({ target: `${dir}/real/m`, source: 'a', fstype: 'ext4' });
  sys.addMount({ target: `${dir}/real/m`, source: 'b', fstype: 'ext4' });
  sys.addMount({ target: `${dir}/real/m/deeper`, source: 'c', fstype: 'ext4' });
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  t.equal((await m.find(`${dir}/link/m`))?.source, 'b');
  t.equal(await m.find(`${dir}/real/other`), undefined);
  let reads = 0;
  const counted = createLinuxMounter({ exec: sys, mountinfo: () => (reads++, sys.mountinfo()) });
  const each = await counted.findEach([`${dir}/link/m`, `${dir}/real/other`, `${dir}/real/m/deeper`]);
  t.same(
    each.map((e) => e?.source),
    ['b', undefined, 'c'],
    'findEach answers as find does',
  );
  t.equal(reads, 1, 'from one read of the mount table');
});

t.test('mount runs mount -t TYPE -o OPTS SOURCE TARGET under the given timeout', async (t) => {
  const sys = new FakeSystem();
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  await m.mount('srv:/export/a', '/t', 'nfs', ['vers=4.1', 'ro'], { timeoutMs: 1234 });
  await m.mount('/dev/sdb', '/s', 'ext4', []);
  t.same(sys.commands, [
    ['mount', '-t', 'nfs', '-o', 'vers=4.1,ro', 'srv:/export/a', '/t'],
    ['mount', '-t', 'ext4', '/dev/sdb', '/s'],
  ]);
  t.equal(sys.calls[0]?.timeoutMs, 1234);
});

t.test('bindMount: plain bind, then a bind remount for ro and per-mount flags only', async (t) => {
  const sys = new FakeSystem();
  sys.addMount({ target: '/stage', source: '/dev/sdb', fstype: 'ext4' });
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  await m.bindMount('/stage', '/pub1', { readonly: false });
  await m.bindMount('/stage', '/pub2', { readonly: true, flags: ['noexec', 'discard', 'ro'] });
  t.same(sys.commands, [
    ['mount', '--bind', '/stage', '/pub1'],
    ['mount', '--bind', '/stage', '/pub2'],
    ['mount', '-o', 'remount,bind,ro,noexec', '/pub2'],
  ]);
  t.ok((await m.find('/pub2'))?.options.includes('ro'));
});

t.test('bindMount undoes the bind when the read-only remount fails', async (t) => {
  const sys = new FakeSystem();
  sys.addMount({ target: '/stage', source: '/dev/sdb', fstype: 'ext4' });
  sys.intercept((cmd, args) =>
    cmd === 'mount' && args[1]?.startsWith('remount') ? Promise.reject(fail(cmd, args, 32, 'nope')) : undefined,
  );
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  await t.rejects(m.bindMount('/stage', '/pub', { readonly: true }), /nope/);
  t.equal(await m.find('/pub'), undefined, 'no writable bind left behind');
});

t.test('unmount peels every layer and treats "not mounted" as done', async (t) => {
  const sys = new FakeSystem();
  sys.addMount({ target: '/t', source: 'a', fstype: 'ext4' });
  sys.addMount({ target: '/t', source: 'b', fstype: 'ext4' });
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  await m.unmount('/t');
  t.same(sys.commands, [
    ['umount', '--no-canonicalize', '/t'],
    ['umount', '--no-canonicalize', '/t'],
  ]);
  t.equal(sys.table.length, 0);
  await m.unmount('/t');
  t.equal(sys.commands.length, 2, 'nothing mounted: no umount run');

  sys.addMount({ target: '/gone', source: 'x', fstype: 'nfs' });
  sys.intercept((cmd, args) => {
    if (cmd !== 'umount') return undefined;
    sys.table.splice(0); // someone else unmounted it first
    return Promise.reject(fail(cmd, args, 32, 'umount: /gone: not mounted.'));
  });
  await m.unmount('/gone');
  t.pass('a concurrent unmount is not an error');
});

t.test('forced unmount escalates: plain (timed out) → -f (failed) → -l', async (t) => {
  const sys = new FakeSystem();
  sys.addMount({ target: '/nfs', source: 'srv:/x', fstype: 'nfs4' });
  sys.intercept((cmd, args) => {
    if (cmd !== 'umount') return undefined;
    if (args.includes('-l')) {
      sys.table.splice(0);
      return Promise.resolve(ok());
    }
    if (args.includes('-f')) return Promise.reject(fail(cmd, args, 16, 'umount.nfs4: /nfs: device is busy'));
    return Promise.reject(timeout(cmd, args, 50));
  });
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  await m.unmount('/nfs', { force: true, timeoutMs: 50 });
  t.same(sys.commands, [
    ['umount', '--no-canonicalize', '/nfs'],
    ['umount', '--no-canonicalize', '-f', '/nfs'],
    ['umount', '--no-canonicalize', '-l', '/nfs'],
  ]);
  t.ok(
    sys.calls.filter((c) => c.cmd === 'umount').every((c) => c.timeoutMs === 50),
    'every step bounded',
  );
});

t.test('without force a busy unmount is reported, never lazily detached', async (t) => {
  const sys = new FakeSystem();
  sys.addMount({ target: '/stage', source: '/dev/sdb', fstype: 'ext4' });
  sys.intercept((cmd, args) =>
    cmd === 'umount' ? Promise.reject(fail(cmd, args, 32, 'umount: /stage: target is busy.')) : undefined,
  );
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  const err = await rejection(m.unmount('/stage'));
  t.ok(isCommandError(err, 'exit'));
  t.match(err.stderr, /busy/);
  t.same(sys.commands, [['umount', '--no-canonicalize', '/stage']]);
});

t.test('probe classifies stat outcomes', async (t) => {
  const dir = tmp(t);
  fs.writeFileSync(path.join(dir, 'file'), '');
  const sys = new FakeSystem();
  sys.intercept((cmd, args) => {
    if (cmd !== 'stat') return undefined;
    const p = args.at(-1) ?? '';
    if (p.endsWith('stale')) return Promise.reject(fail(cmd, args, 1, `stat: cannot statx '${p}': Stale file handle`));
    if (p.endsWith('hung')) return Promise.reject(timeout(cmd, args));
    if (p.endsWith('eio')) return Promise.reject(fail(cmd, args, 1, `stat: cannot statx '${p}': Input/output error`));
    return undefined;
  });
  const m = createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo });
  t.same(await m.probe(dir), { state: 'ok', kind: 'directory' });
  t.same(await m.probe(path.join(dir, 'file')), { state: 'ok', kind: 'file' });
  t.same(await m.probe('/dev/null'), { state: 'ok', kind: 'other' });
  t.same(await m.probe(path.join(dir, 'nope')), { state: 'missing' });
  t.same(await m.probe('relative/some/path'), { state: 'missing' });
  t.match(await m.probe('/x/stale'), { state: 'broken', errno: 'ESTALE' });
  t.match(await m.probe('/x/eio'), { state: 'broken', errno: 'EIO' });
  t.match(await m.probe('/x/hung'), { state: 'broken', errno: 'ETIMEDOUT' });
  t.match(classifyStatError('Transport endpoint is not connected'), { errno: 'ENOTCONN' });
});

t.test('statfs output is turned into bytes and inodes', async (t) => {
  t.same(parseStatFs('4096 100 40 30 1000 900\n'), {
    totalBytes: 409600,
    availableBytes: 122880,
    usedBytes: 245760,
    totalInodes: 1000,
    freeInodes: 900,
    usedInodes: 100,
  });
  t.throws(() => parseStatFs('garbage'), /unexpected output/);
});
