// QMP hot-plug into a running QEMU guest, the command sequence qemu-server uses for a SCSI disk:
// blockdev-add (raw over file) + device_add scsi-hd on scsihw0.0 with scsi-id/lun = slot and the
// wwn; device_del, wait for DEVICE_DELETED, blockdev-del on unplug; block_resize when growing.

import { type Socket, createConnection } from 'node:net';
import type { IoLimits, Hotplug, PlugDisk, VmRef } from './types.js';

type Json = Record<string, unknown>;

export class QmpError extends Error {
  command = '';
  constructor(
    readonly klass: string,
    readonly desc: string,
  ) {
    super(desc);
  }
}

/** One QMP session: greeting, qmp_capabilities, then request/response with events set aside. */
export class QmpClient {
  private buf = '';
  private pending: Array<{ command: string; resolve: (v: unknown) => void; reject: (e: Error) => void }> = [];
  private events: Json[] = [];
  private eventWaiters: Array<{ match: (e: Json) => boolean; resolve: (e: Json) => void }> = [];
  private greeted!: Promise<void>;
  private closedError: Error | undefined;

  private constructor(private readonly sock: Socket) {}

  static async connect(path: string, timeoutMs = 5000): Promise<QmpClient> {
    const sock = createConnection(path);
    const client = new QmpClient(sock);
    client.greeted = new Promise((resolve, reject) => {
      client.pending.push({ command: '(greeting)', resolve: () => resolve(), reject });
    });
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => client.onData(d));
    const onGone = (e?: Error) => client.onClose(e ?? new Error(`QMP socket ${path} closed`));
    sock.on('error', onGone);
    sock.on('close', () => onGone());
    const timer = setTimeout(
      () => sock.destroy(new Error(`QMP socket ${path}: no greeting within ${timeoutMs} ms`)),
      timeoutMs,
    );
    try {
      await client.greeted;
    } finally {
      clearTimeout(timer);
    }
    await client.execute('qmp_capabilities');
    return client;
  }

  private onData(chunk: string): void {
    this.buf += chunk;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (line) this.onMessage(JSON.parse(line) as Json);
    }
  }

  private onMessage(msg: Json): void {
    if ('event' in msg) {
      const waiter = this.eventWaiters.find((w) => w.match(msg));
      if (waiter) {
        this.eventWaiters.splice(this.eventWaiters.indexOf(waiter), 1);
        waiter.resolve(msg);
      } else this.events.push(msg);
      return;
    }
    const waiter = this.pending.shift();
    if (!waiter) return;
    if ('QMP' in msg) waiter.resolve(msg);
    else if ('error' in msg) {
      const e = msg.error as { class?: string; desc?: string };
      const err = new QmpError(e.class ?? 'GenericError', e.desc ?? 'unknown QMP error');
      err.command = waiter.command;
      waiter.reject(err);
    } else waiter.resolve(msg.return);
  }

  private onClose(err: Error): void {
    if (this.closedError) return;
    this.closedError = err;
    for (const p of this.pending.splice(0)) p.reject(err);
  }

  execute(command: string, args?: Json): Promise<unknown> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise((resolve, reject) => {
      this.pending.push({ command, resolve, reject });
      this.sock.write(`${JSON.stringify(args ? { execute: command, arguments: args } : { execute: command })}\n`);
    });
  }

  waitEvent(match: (e: Json) => boolean, timeoutMs: number): Promise<Json | undefined> {
    const i = this.events.findIndex(match);
    if (i >= 0) return Promise.resolve(this.events.splice(i, 1)[0]);
    return new Promise((resolve) => {
      const w = {
        match,
        resolve: (e: Json) => {
          clearTimeout(timer);
          resolve(e);
        },
      };
      const timer = setTimeout(() => {
        const j = this.eventWaiters.indexOf(w);
        if (j >= 0) this.eventWaiters.splice(j, 1);
        resolve(undefined);
      }, timeoutMs);
      this.eventWaiters.push(w);
    });
  }

  close(): void {
    this.sock.end();
    this.sock.destroy();
  }
}

/** A failure worded by us, passed through as is. */
class UnplugError extends Error {}

const isNotFound = (e: unknown) =>
  e instanceof QmpError && (e.klass === 'DeviceNotFound' || /not found|find node/i.test(e.desc));

export class QmpHotplug implements Hotplug {
  constructor(
    private readonly sockets: Record<number, string>,
    private readonly unplugTimeoutMs = 5000,
  ) {}

  private async session<T>(vm: VmRef, fn: (c: QmpClient) => Promise<T>): Promise<T | undefined> {
    const path = this.sockets[vm.vmid];
    if (!path) return undefined; // VM without a guest: state only
    let client: QmpClient | undefined;
    try {
      client = await QmpClient.connect(path);
      return await fn(client);
    } catch (e) {
      if (e instanceof UnplugError) throw e;
      // the wording qemu-server's mon_cmd uses, so hot-plug errors read like the real ones
      if (e instanceof QmpError)
        throw new Error(`VM ${vm.vmid} qmp command '${e.command}' failed - ${e.desc}`, { cause: e });
      throw new Error(`VM ${vm.vmid} qmp command failed - ${(e as Error).message}`, { cause: e });
    } finally {
      client?.close();
    }
  }

  async plug(vm: VmRef, disk: PlugDisk): Promise<void> {
    if (disk.bus !== 'scsi') return;
    await this.session(vm, async (c) => {
      const nodeName = `drive-${disk.slot}`;
      await c.execute('blockdev-add', {
        driver: 'raw',
        'node-name': nodeName,
        file: { driver: 'file', filename: disk.filePath },
      });
      const dev: Json = {
        driver: 'scsi-hd',
        id: disk.slot,
        bus: 'scsihw0.0',
        'scsi-id': disk.index,
        lun: disk.index,
        drive: nodeName,
      };
      if (disk.wwn) dev.wwn = disk.wwn;
      try {
        await c.execute('device_add', dev);
      } catch (e) {
        await c.execute('blockdev-del', { 'node-name': nodeName }).catch(() => undefined);
        throw e;
      }
      if (disk.limits) await c.execute('block_set_io_throttle', { id: disk.slot, ...disk.limits });
    });
  }

  /**
   * qemu-server sends block_set_io_throttle naming its -drive (`device: drive-scsiN`), or on
   * machine versions ≥ 10 sets the limits of its throttle node. A disk plugged here with
   * blockdev-add has no named BlockBackend, so the same command addresses the device by its id.
   */
  async throttle(vm: VmRef, slot: string, limits: IoLimits): Promise<void> {
    if (!slot.startsWith('scsi')) return;
    await this.session(vm, (c) => c.execute('block_set_io_throttle', { id: slot, ...limits }));
  }

  async unplug(vm: VmRef, slot: string): Promise<void> {
    await this.session(vm, async (c) => {
      let present = true;
      try {
        await c.execute('device_del', { id: slot });
      } catch (e) {
        if (!isNotFound(e)) throw e;
        present = false;
      }
      if (present) {
        const ev = await c.waitEvent(
          (e) => e.event === 'DEVICE_DELETED' && (e.data as Json | undefined)?.device === slot,
          this.unplugTimeoutMs,
        );
        if (!ev) throw new UnplugError(`error on hot-unplugging device '${slot}'`);
      }
      try {
        await c.execute('blockdev-del', { 'node-name': `drive-${slot}` });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    });
  }

  async resize(vm: VmRef, slot: string, sizeBytes: number): Promise<void> {
    await this.session(vm, (c) => c.execute('block_resize', { 'node-name': `drive-${slot}`, size: sizeBytes }));
  }

  async close(): Promise<void> {}
}
