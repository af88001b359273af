import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { status } from '@grpc/grpc-js';
import { pino } from 'pino';
import { startDriverServer } from '../../../src/server/driver-server.js';
import { Metrics } from '../../../src/server/metrics.js';
import type { ControllerBackend, Driver, NodeBackend } from '../../../src/csi/types.js';
import { InvalidArgument, NotFound } from '../../../src/errors.js';
import { csiClient, type VolumeCapability } from '../../helpers/csi-client.js';
import { serveDriver } from '../../helpers/driver-server.js';
import { present } from '../../helpers/present.js';

const silent = pino({ level: 'silent' });

function fakeDriver(opts: { slowMs?: number; probe?: () => Promise<boolean> } = {}): Driver {
  const controller: ControllerBackend = {
    capabilities: ['CREATE_DELETE_VOLUME'],
    createVolume: async (req) => {
      if (opts.slowMs) await new Promise((r) => setTimeout(r, opts.slowMs));
      if (req.parameters['bad']) throw new InvalidArgument('parameter "bad" is not supported');
      if (req.parameters['boom']) throw new Error('kaboom');
      return { volume: { volumeId: `vol-${req.name}`, capacityBytes: 1024 } };
    },
    deleteVolume: async () => ({}),
    validateVolumeCapabilities: async () => {
      throw new NotFound('no such volume');
    },
  };
  const node: NodeBackend = {
    capabilities: [],
    nodeGetInfo: async () => ({ nodeId: 'n1' }),
    nodePublishVolume: async () => ({}),
    nodeUnpublishVolume: async () => ({}),
  };
  return {
    name: 'test.csi.example',
    accessibilityConstraints: true,
    onlineExpansion: false,
    probe: opts.probe ?? (async () => true),
    controller,
    node,
  };
}

const cap: VolumeCapability = { mount: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

t.test('identity, validation, typed errors, unimplemented, metrics', async (t) => {
  const metrics = new Metrics(false);
  const { c } = await serveDriver(t, fakeDriver(), { version: '9.9.9', metrics });
  t.same(await c.identity.GetPluginInfo(), { name: 'test.csi.example', vendorVersion: '9.9.9', manifest: {} });
  const caps = await c.identity.GetPluginCapabilities();
  t.same(
    caps.capabilities.map((x) => x.service?.type),
    ['CONTROLLER_SERVICE', 'VOLUME_ACCESSIBILITY_CONSTRAINTS'],
  );
  t.equal((await c.identity.Probe()).ready?.value, true);

  const ok = await c.controller.CreateVolume({ name: 'a', volumeCapabilities: [cap] });
  t.equal(present(ok.volume, 'volume').volumeId, 'vol-a');
  await t.rejects(c.controller.CreateVolume({ volumeCapabilities: [cap] }), {
    code: status.INVALID_ARGUMENT,
    details: /name is required/,
  });
  await t.rejects(c.controller.CreateVolume({ name: 'a' }), {
    code: status.INVALID_ARGUMENT,
    details: /volume_capabilities/,
  });
  await t.rejects(c.controller.CreateVolume({ name: 'a', volumeCapabilities: [cap], parameters: { bad: '1' } }), {
    code: status.INVALID_ARGUMENT,
    details: /"bad"/,
  });
  await t.rejects(c.controller.CreateVolume({ name: 'a', volumeCapabilities: [cap], parameters: { boom: '1' } }), {
    code: status.INTERNAL,
    details: /kaboom/,
  });
  await t.rejects(c.controller.ValidateVolumeCapabilities({ volumeId: 'x', volumeCapabilities: [cap] }), {
    code: status.NOT_FOUND,
  });
  await t.rejects(c.controller.CreateSnapshot({ name: 's', sourceVolumeId: 'x' }), { code: status.UNIMPLEMENTED });
  await t.rejects(c.controller.ControllerPublishVolume({ volumeId: 'v', nodeId: 'n', volumeCapability: cap }), {
    code: status.UNIMPLEMENTED,
  });
  t.same((await c.controller.ControllerGetCapabilities()).capabilities, [
    { rpc: { type: 'CREATE_DELETE_VOLUME' }, type: 'rpc' },
  ]);
  await t.rejects(c.node.NodePublishVolume({ volumeId: 'v', volumeCapability: cap }), {
    code: status.INVALID_ARGUMENT,
    details: /target_path/,
  });
  t.equal((await c.node.NodeGetInfo()).nodeId, 'n1');

  const text = await metrics.registry.metrics();
  t.match(text, /csi_operation_duration_seconds_count\{driver="test.csi.example",method="CreateVolume",code="OK"\} 1/);
  t.match(
    text,
    /csi_operation_errors_total\{driver="test.csi.example",method="CreateVolume",code="INVALID_ARGUMENT"\} 3/,
  );
});

t.test('a concurrent call on the same name is ABORTED', async (t) => {
  const { c } = await serveDriver(t, fakeDriver({ slowMs: 300 }), { mode: 'controller' });
  const first = c.controller.CreateVolume({ name: 'same', volumeCapabilities: [cap] });
  await new Promise((r) => setTimeout(r, 50));
  await t.rejects(c.controller.CreateVolume({ name: 'same', volumeCapabilities: [cap] }), { code: status.ABORTED });
  const other = await c.controller.CreateVolume({ name: 'other', volumeCapabilities: [cap] });
  t.equal(present(other.volume, 'volume').volumeId, 'vol-other');
  t.equal((await first).volume?.volumeId, 'vol-same');
  await t.rejects(c.node.NodeGetInfo(), { code: status.UNIMPLEMENTED }, 'controller mode serves no Node service');
});

t.test('probe reports not ready when the backend hangs or throws, without failing', async (t) => {
  const hang = await startDriverServer({
    driver: fakeDriver({ probe: () => new Promise(() => {}) }),
    mode: 'all',
    endpoint: 'tcp://127.0.0.1:0',
    log: silent,
    version: '1',
    probeTimeoutMs: 200,
  });
  const boom = await startDriverServer({
    driver: fakeDriver({
      probe: async () => {
        throw new Error('down');
      },
    }),
    mode: 'all',
    endpoint: 'tcp://127.0.0.1:0',
    log: silent,
    version: '1',
  });
  const a = csiClient(hang.endpoint);
  const b = csiClient(boom.endpoint);
  t.teardown(async () => {
    a.close();
    b.close();
    await hang.stop(100);
    await boom.stop(100);
  });
  t.equal((await a.identity.Probe()).ready?.value, false);
  t.equal((await b.identity.Probe()).ready?.value, false);
});

t.test('unix socket: stale file replaced, drain waits for in-flight calls, socket removed', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'csi-sock-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sock = path.join(dir, 'csi.sock');
  // A socket file nobody listens on: what a killed process leaves behind.
  execFileSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX); s.bind(${JSON.stringify(sock)})`]);
  t.ok(fs.lstatSync(sock).isSocket());
  const srv = await startDriverServer({
    driver: fakeDriver({ slowMs: 400 }),
    mode: 'all',
    endpoint: `unix://${sock}`,
    log: silent,
    version: '1',
  });
  await t.rejects(
    startDriverServer({ driver: fakeDriver(), mode: 'all', endpoint: `unix://${sock}`, log: silent, version: '1' }),
    /in use by a running process/,
  );
  const c = csiClient(`unix://${sock}`);
  const pending = c.controller.CreateVolume({ name: 'slow', volumeCapabilities: [cap] });
  await new Promise((r) => setTimeout(r, 100));
  t.equal(srv.inflight(), 1);
  await srv.stop(5000);
  t.equal((await pending).volume?.volumeId, 'vol-slow', 'the in-flight call finished during the drain');
  t.notOk(fs.existsSync(sock), 'socket removed');
  c.close();
});
