// docs/design.md#one-validation: one validation for both drivers. Every RPC that takes a name, id or path refuses
// control characters with INVALID_ARGUMENT before any backend sees them; sizes go through one
// capacity parser (negative, fractional, below-required limits are OUT_OF_RANGE) in the gate
// and in each driver's own code.
import t from 'tap';
import type tap from 'tap';
import { status } from '@grpc/grpc-js';
import type { ControllerBackend, Driver, NodeBackend } from '../../../src/csi/types.js';
import { parseCapacityRange } from '../../../src/csi/capacity.js';
import { sizeForCreate, sizeForExpand } from '../../../src/proxmox/controller/params/params.js';
import type { VolumeCapability } from '../../helpers/csi-client.js';
import { serveDriver } from '../../helpers/driver-server.js';

const cap: VolumeCapability = { mount: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

function okDriver(calls: string[]): Driver {
  const seen = (m: string) => async () => {
    calls.push(m);
    return {};
  };
  const controller: ControllerBackend = {
    capabilities: ['CREATE_DELETE_VOLUME', 'PUBLISH_UNPUBLISH_VOLUME', 'EXPAND_VOLUME', 'GET_VOLUME'],
    createVolume: async () => {
      calls.push('CreateVolume');
      return { volume: { volumeId: 'v', capacityBytes: 1 } };
    },
    deleteVolume: seen('DeleteVolume'),
    validateVolumeCapabilities: seen('ValidateVolumeCapabilities'),
    controllerPublishVolume: seen('ControllerPublishVolume'),
    controllerUnpublishVolume: seen('ControllerUnpublishVolume'),
    controllerExpandVolume: seen('ControllerExpandVolume'),
    controllerGetVolume: seen('ControllerGetVolume'),
  };
  const node: NodeBackend = {
    capabilities: ['STAGE_UNSTAGE_VOLUME', 'GET_VOLUME_STATS', 'EXPAND_VOLUME'],
    nodeGetInfo: async () => ({ nodeId: 'n1' }),
    nodeStageVolume: seen('NodeStageVolume'),
    nodeUnstageVolume: seen('NodeUnstageVolume'),
    nodePublishVolume: seen('NodePublishVolume'),
    nodeUnpublishVolume: seen('NodeUnpublishVolume'),
    nodeGetVolumeStats: seen('NodeGetVolumeStats'),
    nodeExpandVolume: seen('NodeExpandVolume'),
  };
  return {
    name: 'test.csi.example',
    accessibilityConstraints: false,
    onlineExpansion: true,
    probe: async () => true,
    controller,
    node,
  };
}

const P = '/var/lib/kubelet/pods/x/volumes/v';
const BAD = ['a\u0000b', 'a\nb', 'tab\there', 'del\u007f', 'c1\u0085'];
/** A valid request of each RPC the tables below change one field of. */
const VALID = {
  CreateVolume: { svc: 'controller', req: { name: 'pvc-1', volumeCapabilities: [cap] } },
  DeleteVolume: { svc: 'controller', req: { volumeId: 'v' } },
  ControllerPublishVolume: { svc: 'controller', req: { volumeId: 'v', nodeId: 'n1', volumeCapability: cap } },
  ControllerUnpublishVolume: { svc: 'controller', req: { volumeId: 'v', nodeId: 'n1' } },
  ValidateVolumeCapabilities: { svc: 'controller', req: { volumeId: 'v', volumeCapabilities: [cap] } },
  ControllerExpandVolume: { svc: 'controller', req: { volumeId: 'v', capacityRange: { requiredBytes: '1' } } },
  ControllerGetVolume: { svc: 'controller', req: { volumeId: 'v' } },
  NodeStageVolume: { svc: 'node', req: { volumeId: 'v', stagingTargetPath: P, volumeCapability: cap } },
  NodeUnstageVolume: { svc: 'node', req: { volumeId: 'v', stagingTargetPath: P } },
  NodePublishVolume: {
    svc: 'node',
    req: { volumeId: 'v', stagingTargetPath: P, targetPath: P + '/t', volumeCapability: cap },
  },
  NodeUnpublishVolume: { svc: 'node', req: { volumeId: 'v', targetPath: P } },
  NodeGetVolumeStats: { svc: 'node', req: { volumeId: 'v', volumePath: P } },
  NodeExpandVolume: { svc: 'node', req: { volumeId: 'v', volumePath: P } },
} satisfies Record<string, { svc: 'controller' | 'node'; req: Record<string, unknown> }>;
type Rpc = keyof typeof VALID;
/** `rows` of [RPC, field names] as rows with the RPC's service and valid request. */
const withValid = (rows: Array<[Rpc, string[]]>) =>
  rows.map(([rpc, fields]) => ({ rpc, svc: VALID[rpc].svc, req: VALID[rpc].req, fields }));

/** Each RPC with the fields that must refuse control characters. */
const TABLE = withValid([
  ['CreateVolume', ['name']],
  ['DeleteVolume', ['volumeId']],
  ['ControllerPublishVolume', ['volumeId', 'nodeId']],
  ['ControllerUnpublishVolume', ['volumeId', 'nodeId']],
  ['ValidateVolumeCapabilities', ['volumeId']],
  ['ControllerExpandVolume', ['volumeId']],
  ['ControllerGetVolume', ['volumeId']],
  ['NodeStageVolume', ['volumeId', 'stagingTargetPath']],
  ['NodeUnstageVolume', ['volumeId', 'stagingTargetPath']],
  ['NodePublishVolume', ['volumeId', 'targetPath', 'stagingTargetPath']],
  ['NodeUnpublishVolume', ['volumeId', 'targetPath']],
  ['NodeGetVolumeStats', ['volumeId', 'volumePath']],
  ['NodeExpandVolume', ['volumeId', 'volumePath']],
]);

type Row = (typeof TABLE)[number];
/** `req` (the row's valid request with one part made bad) is refused for its control character. */
const refused = (
  t: Pick<typeof tap, 'rejects'>,
  c: Awaited<ReturnType<typeof serveDriver>>['c'],
  row: Row,
  req: Record<string, unknown>,
  what: string,
) =>
  t.rejects(
    c.raw(row.svc, row.rpc, req),
    { code: status.INVALID_ARGUMENT, details: /control character/ },
    `${row.rpc} ${what}`,
  );

t.test('control characters in names, ids and paths: INVALID_ARGUMENT for every RPC, backend untouched', async (t) => {
  const calls: string[] = [];
  const { c } = await serveDriver(t, okDriver(calls));
  for (const row of TABLE) {
    await c.raw(row.svc, row.rpc, row.req);
    t.equal(calls.pop(), row.rpc, `${row.rpc}: the valid request reaches the backend`);
    for (const f of row.fields) {
      for (const bad of BAD) await refused(t, c, row, { ...row.req, [f]: bad }, `${f}=${JSON.stringify(bad)}`);
    }
  }
  t.same(calls, [], 'no bad request reached a backend');
});

// Found by the chaos suite: a NUL in an inline NFS volume's subDir reached mount(8) and came
// back INTERNAL. String maps (parameters, contexts) and mount flags are checked like names.
/** Each RPC with its string maps: keys and values must refuse control characters. */
const MAPS = withValid([
  ['CreateVolume', ['parameters', 'mutableParameters']],
  ['ControllerPublishVolume', ['volumeContext']],
  ['NodeStageVolume', ['volumeContext', 'publishContext']],
  ['NodePublishVolume', ['volumeContext', 'publishContext']],
]);

t.test('control characters in parameters, contexts and mount flags: INVALID_ARGUMENT, backend untouched', async (t) => {
  const calls: string[] = [];
  const { c } = await serveDriver(t, okDriver(calls));
  for (const row of MAPS) {
    for (const m of row.fields) {
      await c.raw(row.svc, row.rpc, { ...row.req, [m]: { subDir: 'ns/pvc' } });
      t.equal(calls.pop(), row.rpc, `${row.rpc}: a printable ${m} reaches the backend`);
      for (const bad of BAD) {
        await refused(t, c, row, { ...row.req, [m]: { subDir: bad } }, `${m} value ${JSON.stringify(bad)}`);
        await refused(t, c, row, { ...row.req, [m]: { [bad]: 'x' } }, `${m} key ${JSON.stringify(bad)}`);
      }
    }
    const capKey = row.rpc === 'CreateVolume' ? 'volumeCapabilities' : 'volumeCapability';
    const badCap: VolumeCapability = {
      mount: { mountFlags: ['nfsvers=4.1', 'soft\u0000'] },
      accessMode: { mode: 'SINGLE_NODE_WRITER' },
    };
    await t.rejects(
      c.raw(row.svc, row.rpc, { ...row.req, [capKey]: capKey === 'volumeCapabilities' ? [badCap] : badCap }),
      { code: status.INVALID_ARGUMENT, details: /mount_flags\[1\] contains a control character/ },
      `${row.rpc} mount flag with NUL`,
    );
  }
  t.same(calls, [], 'no bad request reached a backend');
});

t.test('capacity ranges: one parser, refused alike in the gate and in both drivers', async (t) => {
  const calls: string[] = [];
  const { c } = await serveDriver(t, okDriver(calls));
  for (const range of [{ requiredBytes: '-1' }, { limitBytes: '-5' }, { requiredBytes: '10', limitBytes: '5' }]) {
    await t.rejects(
      c.controller.CreateVolume({ name: 'p', volumeCapabilities: [cap], capacityRange: range }),
      { code: status.OUT_OF_RANGE },
      `CreateVolume ${JSON.stringify(range)}`,
    );
    await t.rejects(
      c.controller.ControllerExpandVolume({ volumeId: 'v', capacityRange: range }),
      { code: status.OUT_OF_RANGE },
      `ControllerExpandVolume ${JSON.stringify(range)}`,
    );
  }
  t.same(calls, []);
  t.same(parseCapacityRange({ requiredBytes: '1024', limitBytes: '0' }), { required: 1024, limit: 0 });
  t.same(parseCapacityRange(undefined), { required: 0, limit: 0 });
  for (const v of ['-1', '1.5', 'abc', '1e3', String(2 ** 63)])
    t.throws(() => parseCapacityRange({ requiredBytes: v }), { kind: 'OutOfRange', message: /out of range|below/ }, v);
  t.throws(
    () => sizeForCreate({ requiredBytes: '-1' }),
    { kind: 'OutOfRange', message: /out of range|below/ },
    'Proxmox create',
  );
  t.throws(
    () => sizeForExpand({ requiredBytes: '-1' }),
    { kind: 'OutOfRange', message: /out of range|below/ },
    'Proxmox expand',
  );
});
