// A programming error (TypeError …) below a handler keeps its stack in the log, even when a
// typed error wraps it on the way up (node calls wrap everything in nodeCall); failures that are
// not bugs stay one "failed" line.
import t from 'tap';
import { Writable } from 'node:stream';
import { status } from '@grpc/grpc-js';
import { pino } from 'pino';
import { mapError } from '../../../src/server/status.js';
import { nodeCall } from '../../../src/node/call.js';
import { Internal, Unavailable, programmingError } from '../../../src/errors.js';
import type { Driver } from '../../../src/csi/types.js';
import { serveDriver } from '../../helpers/driver-server.js';

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines };
}

function brokenLookup(volumeId: string): string {
  const table = new Map<string, { path: string }>();
  return (table.get(volumeId) as { path: string }).path; // the bug: a missing entry, its absence cast away
}

t.test('a TypeError inside a node call: INTERNAL for the caller, the stack in the log', async (t) => {
  const { log, lines } = capture();
  const driver: Driver = {
    name: 'bug.csi.example',
    accessibilityConstraints: false,
    onlineExpansion: false,
    probe: async () => true,
    node: {
      capabilities: [],
      nodeGetInfo: async () => ({ nodeId: 'n1' }),
      nodePublishVolume: async () => ({}),
      nodeUnpublishVolume: (req) =>
        nodeCall({ rpc: 'NodeUnpublishVolume', volumeId: req.volumeId, path: req.targetPath }, async () => {
          brokenLookup(req.volumeId);
          return {};
        }),
    },
  };
  const { c } = await serveDriver(t, driver, { mode: 'node', log });
  await t.rejects(c.node.NodeUnpublishVolume({ volumeId: 'v1', targetPath: '/var/lib/kubelet/pods/x' }), {
    code: status.INTERNAL,
    details: /NodeUnpublishVolume v1 at \/var\/lib\/kubelet\/pods\/x: .*path/,
  });
  const bug = lines.find((l) => l.msg === 'unexpected error');
  t.ok(bug, 'logged as unexpected');
  const err = bug?.err as { type?: string; stack?: string } | undefined;
  t.equal(err?.type, 'TypeError');
  t.match(err?.stack, /brokenLookup/, 'the stack names the function with the bug');
  t.match(bug?.wrappedAs, /NodeUnpublishVolume v1/, 'and what the caller was told');
});

t.test('only bugs count: typed failures and network TypeErrors are not', async (t) => {
  const fetchFailed = new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:8006') });
  t.equal(programmingError(new Unavailable('Proxmox x: cannot reach the API', { cause: fetchFailed })), undefined);
  t.equal(mapError(new Unavailable('no answer', { cause: fetchFailed })).unexpected, false);
  const bug = new RangeError('Invalid array length');
  const wrapped = new Internal('NodeStageVolume v at /p: Invalid array length', { cause: bug });
  t.equal(programmingError(wrapped), bug, 'found in the cause chain');
  t.same(
    { ...mapError(wrapped), logged: mapError(wrapped).logged === bug },
    { code: status.INTERNAL, message: wrapped.message, unexpected: true, logged: true },
  );
  t.equal(mapError(new Error('plain')).unexpected, true, 'anything not typed is unexpected as before');
});
