// The SCSI lookup against a fake sysfs tree. Device nodes are the host's real /dev/loop0 and
// /dev/loop1 (any block device node does; they are only stat'ed, never opened).
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLinuxBlockDevices } from '../../../src/os/blockdevices.js';
import { foreignScsiSlots, isDriverScsiDisk, listScsiDevices, normalizeWwn, wwnOfWwid } from '../../../src/os/scsi.js';
import { PROXMOX_DISKS } from '../../../src/proxmox/node/deps.js';
import { FakeSystem } from './fakes.js';

const WWN1 = '5056432d49443031'; // "PVC-ID01"
const WWN7 = '5056432d49443037';

function fakeSysfs(t: { teardown(fn: () => void): void }) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sysfs-test-'));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const devices = path.join(root, 'bus', 'scsi', 'devices');
  fs.mkdirSync(devices, { recursive: true });
  const addDisk = (hctl: string, o: { vendor: string; wwid?: string; block?: string }) => {
    const dir = path.join(devices, hctl);
    fs.mkdirSync(dir, { recursive: true });
    // sysfs pads vendor to 8 characters and ends lines with a newline.
    fs.writeFileSync(path.join(dir, 'vendor'), `${o.vendor.padEnd(8)}\n`);
    if (o.wwid) fs.writeFileSync(path.join(dir, 'wwid'), `${o.wwid}\n`);
    if (o.block) fs.mkdirSync(path.join(dir, 'block', o.block), { recursive: true });
  };
  const addHost = (n: number) => {
    const dir = path.join(root, 'class', 'scsi_host', `host${n}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'scan'), '');
    fs.mkdirSync(path.join(devices, `host${n}`), { recursive: true });
  };
  return { root, addDisk, addHost };
}

/** The Linux block-device adapter on a fake sysfs (s.root), devices named under /dev. */
const blockDevices = (s: { root: string }, o: Partial<Parameters<typeof createLinuxBlockDevices>[0]> = {}) =>
  createLinuxBlockDevices({
    exec: new FakeSystem(),
    driverDisks: PROXMOX_DISKS,
    sysfsRoot: s.root,
    devRoot: '/dev',
    ...o,
  });

t.test('WWN helpers: the adapter reads WWNs, the driver says which are its own', async (t) => {
  t.equal(normalizeWwn('0x5056432D49443031'), WWN1);
  t.equal(normalizeWwn('0x1234'), undefined);
  t.equal(normalizeWwn('zz56432d49443031'), undefined);
  t.equal(wwnOfWwid(` NAA.${WWN1.toUpperCase()}\n`), WWN1);
  t.equal(wwnOfWwid('t10.ATA     QEMU HARDDISK'), undefined);
  t.ok(isDriverScsiDisk({ vendor: 'QEMU', wwid: `naa.${WWN1}` }, PROXMOX_DISKS));
  t.notOk(isDriverScsiDisk({ vendor: 'ATA', wwid: `naa.${WWN1}` }, PROXMOX_DISKS), 'only QEMU disks');
  t.notOk(isDriverScsiDisk({ vendor: 'QEMU', wwid: 'naa.6001405abcdef012' }, PROXMOX_DISKS));
  t.notOk(isDriverScsiDisk({ vendor: 'QEMU', wwid: `naa.${WWN1}00` }, PROXMOX_DISKS));
});

t.test('lists H:C:T:L entries only, with trimmed vendor/wwid and block name', async (t) => {
  const s = fakeSysfs(t);
  s.addHost(0);
  fs.mkdirSync(path.join(s.root, 'bus', 'scsi', 'devices', 'target0:0:1'));
  s.addDisk('0:0:1:1', { vendor: 'QEMU', wwid: `naa.${WWN1}`, block: 'sdb' });
  const list = await listScsiDevices(s.root);
  t.same(list, [
    { hctl: '0:0:1:1', host: 0, channel: 0, target: 1, lun: 1, vendor: 'QEMU', wwid: `naa.${WWN1}`, blockName: 'sdb' },
  ]);
  t.same(
    await listScsiDevices(path.join(s.root, 'missing')),
    [],
    'a machine without SCSI has no devices, not an error',
  );
});

t.test('findByWwn: the QEMU disk with wwid naa.<wwn>, as a /dev node', async (t) => {
  const s = fakeSysfs(t);
  s.addHost(0);
  s.addDisk('0:0:0:0', { vendor: 'QEMU', block: 'loop1' }); // boot disk, no wwid
  s.addDisk('1:0:0:1', { vendor: 'ATA', wwid: `naa.${WWN1}`, block: 'loop1' }); // not a QEMU disk
  s.addDisk('0:0:1:1', { vendor: 'QEMU', wwid: `naa.${WWN1}`, block: 'loop0' });
  const bd = blockDevices(s, { deviceDir: path.join(s.root, 'none') });
  t.equal(await bd.findByWwn(WWN1, { waitMs: 0 }), '/dev/loop0');
});

t.test('findByWwn rescans every SCSI host and waits for a late disk', async (t) => {
  const s = fakeSysfs(t);
  s.addHost(0);
  s.addHost(2);
  // Real time at a small scale: the sysfs reads are real I/O, which a fake clock would jump over.
  const bd = blockDevices(s, { deviceDir: path.join(s.root, 'none'), pollMs: 10 });
  setTimeout(() => s.addDisk('2:0:0:7', { vendor: 'QEMU', wwid: `naa.${WWN7}`, block: 'loop1' }), 80);
  const started = Date.now();
  const found = await bd.findByWwn(WWN7, { waitMs: 5000 });
  t.equal(found, '/dev/loop1');
  t.ok(Date.now() - started >= 70, 'waited for it');
  for (const h of ['host0', 'host2']) {
    t.equal(
      fs.readFileSync(path.join(s.root, 'class', 'scsi_host', h, 'scan'), 'utf8'),
      '- - -',
      `${h} asked to scan all`,
    );
  }
});

t.test('findByWwn gives up after the bounded wait', async (t) => {
  const s = fakeSysfs(t);
  s.addHost(0);
  const bd = blockDevices(s, { deviceDir: path.join(s.root, 'none'), pollMs: 10 });
  const started = Date.now();
  t.equal(await bd.findByWwn(WWN1, { waitMs: 100 }), undefined);
  const elapsed = Date.now() - started;
  t.ok(elapsed >= 95 && elapsed < 1500, `gave up after ${elapsed} ms`);
});

t.test('findByWwn falls back to the wwn-0x link in the device dir', async (t) => {
  const s = fakeSysfs(t);
  const devDir = path.join(s.root, 'by-id');
  fs.mkdirSync(devDir);
  fs.symlinkSync('/dev/loop1', path.join(devDir, `wwn-0x${WWN1}`));
  fs.writeFileSync(path.join(s.root, 'plain-file'), '');
  fs.symlinkSync(path.join(s.root, 'plain-file'), path.join(devDir, `wwn-0x${WWN7}`));
  const bd = blockDevices(s, { deviceDir: devDir, pollMs: 20 });
  t.equal(await bd.findByWwn(WWN1, { waitMs: 0 }), '/dev/loop1');
  t.equal(
    await bd.findByWwn(WWN7, { waitMs: 0 }),
    undefined,
    'a link to something that is not a block device is ignored',
  );
});

t.test('foreign slots: QEMU disks in scsi1..30 that are not ours', async (t) => {
  const s = fakeSysfs(t);
  s.addDisk('0:0:0:0', { vendor: 'QEMU', block: 'sda' }); // scsi0, the boot disk: not a slot we use
  s.addDisk('0:0:0:1', { vendor: 'QEMU', wwid: `naa.${WWN1}`, block: 'sdb' }); // ours
  s.addDisk('0:0:0:5', { vendor: 'QEMU', wwid: 'naa.6001405abcdef012', block: 'sdc' }); // someone's data disk
  s.addDisk('3:0:0:9', { vendor: 'QEMU', block: 'sdd' }); // virtio-scsi-single: own host, LUN = slot
  s.addDisk('4:0:2:0', { vendor: 'QEMU', block: 'sde' }); // LSI: slot in the target id
  s.addDisk('5:0:0:3', { vendor: 'ATA', block: 'sdf' }); // not a Proxmox scsi disk
  t.equal(await foreignScsiSlots(s.root, PROXMOX_DISKS), 3);
});

t.test('deviceByMajMin reads DEVNAME from /sys/dev/block/M:m/uevent', async (t) => {
  const s = fakeSysfs(t);
  const dir = path.join(s.root, 'dev', 'block', '8:16');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'uevent'), 'MAJOR=8\nMINOR=16\nDEVNAME=sdb\nDEVTYPE=disk\n');
  const bd = blockDevices(s);
  t.equal(await bd.deviceByMajMin('8:16'), '/dev/sdb');
  t.equal(await bd.deviceByMajMin('8:32'), undefined, 'gone device');
});

t.test('rescan writes 1 to the disk rescan file, and skips devices without one', async (t) => {
  const s = fakeSysfs(t);
  const rescan = path.join(s.root, 'class', 'block', 'loop0', 'device');
  fs.mkdirSync(rescan, { recursive: true });
  fs.writeFileSync(path.join(rescan, 'rescan'), '');
  const bd = createLinuxBlockDevices({ exec: new FakeSystem(), driverDisks: PROXMOX_DISKS, sysfsRoot: s.root });
  await bd.rescan('/dev/loop0');
  t.equal(fs.readFileSync(path.join(rescan, 'rescan'), 'utf8'), '1');
  await bd.rescan('/dev/loop1');
  t.pass('no rescan file: nothing to do');
});
