// The block device adapter on a real loop device (root), plus its pure helpers.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  createLinuxBlockDevices,
  majMinFromRdev,
  mkfsCommand,
  parseBlkidExport,
} from '../../../src/os/blockdevices.js';
import { createExec, isCommandError } from '../../../src/os/exec.js';
import { canUseLoopDevices } from '../node/loop-rig.js';
import { rejection } from '../../helpers/rejection.js';

t.test('mkfs command lines', async (t) => {
  // -q on both: the progress output is read by nothing and cost the node plugin CPU per format.
  t.same(mkfsCommand('/dev/sdb', 'ext4'), ['mkfs.ext4', ['-q', '-m0', '/dev/sdb']]);
  t.same(mkfsCommand('/dev/sdb', 'ext4', { blockSize: 4096, inodeSize: 256 }), [
    'mkfs.ext4',
    ['-q', '-m0', '-b', '4096', '-I', '256', '/dev/sdb'],
  ]);
  t.same(mkfsCommand('/dev/sdb', 'xfs', { blockSize: 4096, inodeSize: 512 }), [
    'mkfs.xfs',
    ['-q', '-b', 'size=4096', '-i', 'size=512', '/dev/sdb'],
  ]);
  t.notOk(mkfsCommand('/dev/sdb', 'xfs')[1].includes('-f'), 'xfs is never forced');
});

t.test('blkid export parsing and device numbers', async (t) => {
  t.same(parseBlkidExport('DEVNAME=/dev/sdb\nUUID=x\nTYPE=ext4\nUSAGE=filesystem\n'), { fsType: 'ext4' });
  t.same(parseBlkidExport('DEVNAME=/dev/sdb\nPTUUID=y\nPTTYPE=gpt\n'), { ptType: 'gpt' });
  t.same(parseBlkidExport(''), {});
  t.equal(majMinFromRdev(0x0810n), '8:16');
  t.equal(majMinFromRdev(0x0700n), '7:0');
  t.equal(majMinFromRdev(0x10300n), '259:0', 'major > 255 (nvme)');
});

t.test('hasData: any non-zero byte in the window, nothing past it, short files', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bd-hasdata-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const bd = createLinuxBlockDevices({
    exec: createExec(),
    driverDisks: { ownsWwn: () => false, minSlot: 1, maxSlot: 30 },
  });
  const file = (name: string, size: number, at?: number) => {
    const f = path.join(dir, name);
    const b = Buffer.alloc(size);
    if (at !== undefined) b[at] = 1;
    fs.writeFileSync(f, b);
    return f;
  };
  const MiB = 1024 * 1024;
  t.equal(await bd.hasData(file('zeros', 2 * MiB)), false);
  t.equal(await bd.hasData(file('last', 2 * MiB, MiB - 1)), true, 'last byte of the first MiB');
  t.equal(await bd.hasData(file('past', 2 * MiB, MiB)), false, 'first byte after it');
  t.equal(await bd.hasData(file('first', 2 * MiB, 0)), true);
  t.equal(await bd.hasData(file('short', 4096, 4095)), true, 'shorter than the window');
  t.equal(await bd.hasData(file('empty', 0)), false);
});

t.test('probe, format, size and device numbers on a loop device', { skip: canUseLoopDevices() }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bd-test-'));
  const file = path.join(dir, 'disk.raw');
  fs.closeSync(fs.openSync(file, 'w'));
  fs.truncateSync(file, 400 * 1024 * 1024);
  const dev = execFileSync('losetup', ['-f', '--show', file], { encoding: 'utf8' }).trim();
  t.teardown(() => {
    execFileSync('losetup', ['-d', dev]);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const bd = createLinuxBlockDevices({
    exec: createExec(),
    driverDisks: { ownsWwn: () => false, minSlot: 1, maxSlot: 30 },
  });
  t.same(await bd.probe(dev), {}, 'empty disk');
  t.equal(await bd.size(dev), 400 * 1024 * 1024);
  const mm = await bd.majMinOf(dev);
  t.match(mm, /^7:\d+$/);
  t.equal(await bd.deviceByMajMin(mm), dev, 'sysfs maps the numbers back to the node');
  t.equal(await bd.foreignSlots(), 0, 'no QEMU SCSI disks on this host');
  await bd.format(dev, 'ext4', { blockSize: 4096 });
  t.same(await bd.probe(dev), { fsType: 'ext4' });
  const err = await rejection(bd.format(dev, 'xfs'));
  t.ok(isCommandError(err, 'exit'), 'mkfs.xfs refuses to overwrite an existing filesystem');
  t.match(err.stderr, /existing filesystem/);
  t.same(await bd.probe(dev), { fsType: 'ext4' }, 'still ext4');
  const gone = await rejection(bd.format(path.join(dir, 'no-such-device'), 'ext4'));
  t.ok(isCommandError(gone, 'exit'), 'a failing mkfs.ext4 -q fails the call');
  t.match(gone.stderr, /does not exist/, 'and -q keeps its error message');
  await t.rejects(bd.resizeFs(dev, '/', 'btrfs'), /only ext4 and xfs/);
});
