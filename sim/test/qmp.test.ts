// The qmp backend against a fake QMP server on a unix socket: the command sequence qemu-server
// uses to hot-plug, unplug and grow a SCSI disk, and how QMP errors surface through the API.

import { statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { type Server, type Socket, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { QmpHotplug } from '../backend/qmp.js';
import { startTestSim, wwnForSlot } from './fixtures/helpers.js';

type Cmd = { execute: string; arguments?: Record<string, unknown> };

class FakeQmp {
  commands: Cmd[] = [];
  failDeviceAdd: string | undefined;
  skipDeviceDeleted = false;
  private server: Server;
  private sockets = new Set<Socket>();

  constructor(readonly path: string) {
    this.server = createServer((sock) => {
      this.sockets.add(sock);
      sock.on('close', () => this.sockets.delete(sock));
      const send = (o: unknown) => sock.write(`${JSON.stringify(o)}\n`);
      send({ QMP: { version: { qemu: { major: 9, minor: 0, micro: 2 } }, capabilities: [] } });
      let buf = '';
      sock.on('data', (d) => {
        buf += d.toString();
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const cmd = JSON.parse(buf.slice(0, nl)) as Cmd;
          buf = buf.slice(nl + 1);
          this.commands.push(cmd);
          // an unrelated event first, as a real QEMU interleaves them
          send({ event: 'RTC_CHANGE', data: { offset: 0 }, timestamp: { seconds: 1, microseconds: 0 } });
          if (cmd.execute === 'device_add' && this.failDeviceAdd) {
            send({ error: { class: 'GenericError', desc: this.failDeviceAdd } });
            continue;
          }
          send({ return: {} });
          if (cmd.execute === 'device_del' && !this.skipDeviceDeleted) {
            send({
              event: 'DEVICE_DELETED',
              data: { device: cmd.arguments?.id, path: `/machine/peripheral/${String(cmd.arguments?.id)}` },
              timestamp: { seconds: 2, microseconds: 0 },
            });
          }
        }
      });
    });
  }

  listen(): Promise<void> {
    return new Promise((r) => this.server.listen(this.path, r));
  }

  names(): string[] {
    return this.commands.map((c) => c.execute);
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

const dir = await mkdtemp(join(tmpdir(), 'qmp-test-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const fake = new FakeQmp(join(dir, 'qmp.sock'));
await fake.listen();
t.teardown(() => fake.close());
const vm = { vmid: 101, name: 'talos-cp-1', node: 'hyper1' };

t.test('QmpHotplug sends the qemu-server sequence', async (t) => {
  fake.commands = [];
  const hp = new QmpHotplug({ 101: fake.path }, 200);
  await hp.plug(vm, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/x/vm-9999-a.raw', wwn: '0x5056432d49443031' });
  t.same(fake.commands, [
    { execute: 'qmp_capabilities' },
    {
      execute: 'blockdev-add',
      arguments: { driver: 'raw', 'node-name': 'drive-scsi1', file: { driver: 'file', filename: '/x/vm-9999-a.raw' } },
    },
    {
      execute: 'device_add',
      arguments: {
        driver: 'scsi-hd',
        id: 'scsi1',
        bus: 'scsihw0.0',
        'scsi-id': 1,
        lun: 1,
        drive: 'drive-scsi1',
        wwn: '0x5056432d49443031',
      },
    },
  ]);
  fake.commands = [];
  await hp.resize(vm, 'scsi1', 2 * 1024 ** 3);
  t.same(fake.commands[1], { execute: 'block_resize', arguments: { 'node-name': 'drive-scsi1', size: 2 * 1024 ** 3 } });
  fake.commands = [];
  await hp.unplug(vm, 'scsi1');
  t.same(fake.names(), ['qmp_capabilities', 'device_del', 'blockdev-del']);
  t.same(fake.commands[2]?.arguments, { 'node-name': 'drive-scsi1' });
  fake.commands = [];
  await hp.plug({ ...vm, vmid: 999 }, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/x' });
  t.same(fake.commands, [], 'a VM without a QMP socket is state only');
  await hp.plug(vm, { slot: 'virtio1', bus: 'virtio', index: 1, filePath: '/x' });
  t.same(fake.commands, [], 'only SCSI disks go to scsihw0');
});

t.test('QmpHotplug errors: device_add refused, unplug never completes, no socket', async (t) => {
  const hp = new QmpHotplug({ 101: fake.path, 102: join(dir, 'missing.sock') }, 150);
  fake.commands = [];
  fake.failDeviceAdd = "Duplicate ID 'scsi1' for device";
  await t.rejects(hp.plug(vm, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/x/a.raw' }), {
    message: "VM 101 qmp command 'device_add' failed - Duplicate ID 'scsi1' for device",
  });
  t.same(
    fake.names(),
    ['qmp_capabilities', 'blockdev-add', 'device_add', 'blockdev-del'],
    'the block node is removed again',
  );
  fake.failDeviceAdd = undefined;
  fake.skipDeviceDeleted = true;
  const s = Date.now();
  await t.rejects(hp.unplug(vm, 'scsi1'), { message: "error on hot-unplugging device 'scsi1'" });
  t.ok(Date.now() - s >= 140, 'waited for DEVICE_DELETED');
  fake.skipDeviceDeleted = false;
  await t.rejects(
    hp.plug({ ...vm, vmid: 102 }, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/x' }),
    /VM 102 qmp command failed - .*ENOENT/,
  );
});

/** A simulator whose VM 101 is the fake QEMU, with a 1 GiB volume of VM 9999 on local-lvm. */
async function simWithVolume(t: { teardown(fn: () => unknown): void }, filename: string) {
  const ts = await startTestSim({ backend: 'qmp', qmp: { 101: fake.path } });
  t.teardown(() => ts.close());
  const { call } = ts;
  const created = await call('POST', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999, filename, size: '1G' });
  return { ts, call, volid: created.body?.data as string };
}

t.test('through the API: attach, grow, detach, and a refused hot-plug staying pending', async (t) => {
  const { ts, call, volid } = await simWithVolume(t, 'vm-9999-pvc-q');
  const file = join(ts.sim.stateDir, 'images', 'hyper1', 'local-lvm', 'vm-9999-pvc-q.raw');
  t.equal(statSync(file).size, 1024 ** 3, 'a sparse file backs the volume');
  fake.commands = [];
  t.equal((await call('PUT', '/nodes/hyper1/qemu/101/config', { scsi2: `${volid},wwn=${wwnForSlot(2)}` })).status, 200);
  t.same(fake.commands[1]?.arguments, {
    driver: 'raw',
    'node-name': 'drive-scsi2',
    file: { driver: 'file', filename: file },
  });
  t.match(fake.commands[2]?.arguments, { id: 'scsi2', 'scsi-id': 2, lun: 2, wwn: '0x5056432d49443032' });
  fake.commands = [];
  const up = await call('PUT', '/nodes/hyper1/qemu/101/resize', { disk: 'scsi2', size: '2G' });
  t.equal((await ts.waitTask('hyper1', up.body?.data as string)).exitstatus, 'OK');
  t.same(fake.commands[1], { execute: 'block_resize', arguments: { 'node-name': 'drive-scsi2', size: 2 * 1024 ** 3 } });
  t.equal(statSync(file).size, 2 * 1024 ** 3);
  fake.commands = [];
  t.equal((await call('PUT', '/nodes/hyper1/qemu/101/unlink', { idlist: 'scsi2' })).status, 200);
  t.same(fake.names(), ['qmp_capabilities', 'device_del', 'blockdev-del']);
  fake.commands = [];
  t.equal((await call('PUT', '/nodes/hyper1/qemu/111/config', { scsi2: volid })).status, 200);
  t.same(fake.commands, [], 'VM 111 has no guest');
  await call('PUT', '/nodes/hyper1/qemu/111/unlink', { idlist: 'scsi2' });
  fake.failDeviceAdd = 'Bus scsihw0.0 does not support hotplugging';
  const r = await call('PUT', '/nodes/hyper1/qemu/101/config', { scsi3: volid });
  fake.failDeviceAdd = undefined;
  t.equal(r.status, 400);
  t.same(r.body?.errors, {
    scsi3: "hotplug problem - VM 101 qmp command 'device_add' failed - Bus scsihw0.0 does not support hotplugging",
  });
  const pend = (await call('GET', '/nodes/hyper1/qemu/101/pending')).body?.data as Array<Record<string, unknown>>;
  t.match(
    pend.find((i) => i.key === 'scsi3'),
    { pending: `${volid},size=2G` },
  );
  t.equal((await call('PUT', '/nodes/hyper1/qemu/101/config', { revert: 'scsi3' })).status, 200);
});

t.test('option changes of an attached disk: throttle live, backup config-only, cache stays pending', async (t) => {
  const { call, volid } = await simWithVolume(t, 'vm-9999-pvc-t');
  const line = (extra: string) => `${volid},backup=0,iothread=1${extra},wwn=${wwnForSlot(4)}`;
  const current = async () =>
    ((await call('GET', '/nodes/hyper1/qemu/101/pending')).body?.data as Array<Record<string, unknown>>).find(
      (i) => i.key === 'scsi4',
    );
  /** Writes scsi4's line (with `backup` as given) and records only what this write sends to QEMU. */
  const write = async (extra: string, backup = 0) => {
    fake.commands = [];
    const r = await call('PUT', '/nodes/hyper1/qemu/101/config', {
      scsi4: line(extra).replace('backup=0', `backup=${String(backup)}`),
    });
    t.equal(r.status, 200, `scsi4 ${extra} backup=${String(backup)}`);
  };
  await write(',iops_rd=100,iops_wr=100');
  t.same(
    fake.commands.at(-1),
    {
      execute: 'block_set_io_throttle',
      arguments: { id: 'scsi4', bps: 0, bps_rd: 0, bps_wr: 0, iops: 0, iops_rd: 100, iops_wr: 100 },
    },
    'plugged with its limits',
  );

  await write(',iops_rd=100,iops_wr=100,mbps_rd=40,mbps_wr=40', 1);
  t.same(
    fake.commands.slice(1),
    [
      {
        execute: 'block_set_io_throttle',
        arguments: {
          id: 'scsi4',
          bps: 0,
          bps_rd: 40 * 1024 * 1024,
          bps_wr: 40 * 1024 * 1024,
          iops: 0,
          iops_rd: 100,
          iops_wr: 100,
        },
      },
    ],
    'new limits go to QEMU, no replug',
  );
  t.match(await current(), { value: /backup=1.*mbps_rd=40/ }, 'applied, not pending');
  t.notOk((await current())?.pending);

  await write(',mbps_rd=40,mbps_wr=40');
  t.same(
    fake.commands.slice(1).map((c) => c.arguments),
    [{ id: 'scsi4', bps: 0, bps_rd: 40 * 1024 * 1024, bps_wr: 40 * 1024 * 1024, iops: 0, iops_rd: 0, iops_wr: 0 }],
    'a removed limit is set to 0',
  );

  await write(',mbps_rd=40,mbps_wr=40', 1);
  t.same(fake.commands, [], 'backup alone never reaches QEMU');
  t.match(await current(), { value: /backup=1/ }, 'it is written to the config at once');

  await write(',cache=writeback,mbps_rd=40,mbps_wr=40', 1);
  t.match(await current(), { pending: /cache=writeback/ }, 'a cache change waits for a restart');
  t.same(fake.commands, [], 'and touches nothing live');
  await call('PUT', '/nodes/hyper1/qemu/101/config', { revert: 'scsi4' });
  await call('PUT', '/nodes/hyper1/qemu/101/unlink', { idlist: 'scsi4' });
});
