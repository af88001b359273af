// The CSI protocol the program serves comes from src/gen/csi-descriptor.json (no .proto parsing at
// run time). These checks pin it to proto/csi.proto and to what @grpc/proto-loader (which the
// servers used before, and the generated types were made for) would have built from the .proto.
import t from 'tap';
import fs from 'node:fs';
import * as protoLoader from '@grpc/proto-loader';
import { DESCRIPTOR_FILE, descriptorText, PROTO_FILE } from '../../../scripts/gen-descriptor.js';
import { csiGrpc, csiReflection } from '../../../src/server/proto.js';

t.test('src/gen/csi-descriptor.json is what scripts/gen-descriptor.ts makes of proto/csi.proto', (t) => {
  // (t.ok, not t.equal: the diff of a one-line 20 kB file says nothing)
  t.ok(fs.readFileSync(DESCRIPTOR_FILE, 'utf8') === descriptorText(), 'stale: run npm run gen');
  t.end();
});

const loaded = protoLoader.loadSync(PROTO_FILE, {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});

// Messages that exercise maps, oneofs, enums, int64, wrappers, repeated and nested messages.
const SAMPLES: ['Identity' | 'Controller' | 'Node', string, object][] = [
  [
    'Controller',
    'CreateVolume',
    {
      name: 'pvc-1',
      capacityRange: { requiredBytes: '1073741824', limitBytes: '0' },
      volumeCapabilities: [
        {
          mount: { fsType: 'ext4', mountFlags: ['noatime'], volumeMountGroup: '' },
          accessMode: { mode: 'SINGLE_NODE_WRITER' },
        },
        { block: {}, accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' } },
      ],
      parameters: { storage: 'local-lvm' },
      secrets: { password: 'x' },
      accessibilityRequirements: { requisite: [{ segments: { zone: 'a' } }], preferred: [] },
      volumeContentSource: { snapshot: { snapshotId: 's1' } },
      mutableParameters: { backup: 'true' },
    },
  ],
  ['Identity', 'Probe', {}],
  ['Node', 'NodeGetVolumeStats', { volumeId: 'v', volumePath: '/p', stagingTargetPath: '' }],
];
const RESPONSES: ['Identity' | 'Controller' | 'Node', string, object][] = [
  ['Identity', 'Probe', { ready: { value: false } }],
  [
    'Controller',
    'ListVolumes',
    {
      entries: [
        {
          volume: {
            volumeId: 'a',
            capacityBytes: '9007199254740993',
            volumeContext: { k: 'v' },
            accessibleTopology: [{ segments: { z: '1' } }],
          },
          status: { publishedNodeIds: ['n1'], volumeCondition: { abnormal: true, message: 'm' } },
        },
      ],
      nextToken: '2',
    },
  ],
  [
    'Node',
    'NodeGetVolumeStats',
    { usage: [{ available: '1', total: '2', used: '1', unit: 'BYTES' }], volumeCondition: null },
  ],
  ['Node', 'NodeGetCapabilities', { capabilities: [{ rpc: { type: 'STAGE_UNSTAGE_VOLUME' } }] }],
];

t.test('service definitions match @grpc/proto-loader: paths, names, bytes on the wire, decoded objects', (t) => {
  const ours = csiGrpc().csi.v1;
  for (const s of ['Identity', 'Controller', 'Node', 'GroupController'] as const) {
    const theirs = loaded[`csi.v1.${s}`] as protoLoader.ServiceDefinition;
    const mine = ours[s].service as unknown as protoLoader.ServiceDefinition;
    t.same(Object.keys(mine).sort(), Object.keys(theirs).sort(), `${s}: methods`);
    for (const [name, m] of Object.entries(theirs)) {
      const o = mine[name];
      t.ok(o, `${s}.${name}`);
      if (!o) continue;
      t.equal(o.path, m.path);
      t.equal(o.originalName, m.originalName);
      t.equal(o.requestStream, m.requestStream);
      t.equal(o.responseStream, m.responseStream);
    }
  }
  const defOf = (s: 'Identity' | 'Controller' | 'Node', method: string) => {
    const theirs = (loaded[`csi.v1.${s}`] as protoLoader.ServiceDefinition)[method];
    const mine = (ours[s].service as unknown as protoLoader.ServiceDefinition)[method];
    if (!theirs || !mine) throw new Error(`${s}.${method} missing`);
    return { theirs, mine };
  };
  const codecs = [
    ['request', SAMPLES, 'requestSerialize', 'requestDeserialize'],
    ['response', RESPONSES, 'responseSerialize', 'responseDeserialize'],
  ] as const;
  for (const [what, values, serialize, deserialize] of codecs) {
    for (const [s, method, value] of values) {
      const { mine, theirs } = defOf(s, method);
      const bytes = mine[serialize](value);
      t.same(Buffer.from(bytes), Buffer.from(theirs[serialize](value)), `${s}.${method} ${what}: same bytes`);
      t.same(mine[deserialize](bytes), theirs[deserialize](bytes), `${s}.${method} ${what}: same decoded object`);
    }
  }
  t.end();
});

t.test('the csi_secret option survives into the reflection root', (t) => {
  const f = csiReflection().lookupType('csi.v1.NodeStageVolumeRequest').fields['secrets'];
  t.equal(f?.options?.['(csi_secret)'], true);
  t.end();
});
