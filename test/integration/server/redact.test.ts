import t from 'tap';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { redact, REDACTED } from '../../../src/server/redact.js';
import type { Driver, NodeStageVolumeRequest } from '../../../src/csi/types.js';
import { serveDriver } from '../../helpers/driver-server.js';

t.test('fields marked csi_secret are replaced, at any depth', async (t) => {
  const out = redact('NodeStageVolumeRequest', {
    volumeId: 'v1',
    secrets: { user: 'admin', 'api-key': 'hunter2' },
    volumeContext: { server: 'nas', token: 'abc123' },
    volumeCapability: { mount: { fsType: 'ext4', mountFlags: ['noatime', 'password=hunter2'] } },
  }) as NodeStageVolumeRequest;
  t.equal(out.volumeId, 'v1');
  t.same(out.secrets, { user: REDACTED, 'api-key': REDACTED });
  t.same(out.volumeContext, { server: 'nas', token: REDACTED });
  t.same(out.volumeCapability?.mount?.mountFlags, ['noatime', `password=${REDACTED}`]);
  t.notMatch(JSON.stringify(out), /hunter2|abc123/);
});

t.test('every request type with a secrets field is covered', async (t) => {
  for (const type of [
    'CreateVolumeRequest',
    'DeleteVolumeRequest',
    'ControllerPublishVolumeRequest',
    'ControllerUnpublishVolumeRequest',
    'ValidateVolumeCapabilitiesRequest',
    'ControllerExpandVolumeRequest',
    'NodePublishVolumeRequest',
    'NodeExpandVolumeRequest',
    'CreateSnapshotRequest',
    'DeleteSnapshotRequest',
    'ListSnapshotsRequest',
    'ControllerModifyVolumeRequest',
  ]) {
    const out = redact(type, { secrets: { password: 'p4ss', other: 'x' } }) as { secrets: Record<string, string> };
    t.same(out.secrets, { password: REDACTED, other: REDACTED }, type);
  }
});

t.test('the debug log of a real call never contains a secret', async (t) => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  const log = pino({ level: 'debug' }, sink);
  const driver: Driver = {
    name: 'redact.test',
    accessibilityConstraints: false,
    onlineExpansion: false,
    probe: async () => true,
    controller: {
      capabilities: ['CREATE_DELETE_VOLUME'],
      createVolume: async (req) => ({ volume: { volumeId: req.name } }),
      deleteVolume: async () => ({}),
      validateVolumeCapabilities: async () => ({}),
    },
  };
  const { c } = await serveDriver(t, driver, { log, version: '1', drainMs: 100 });
  await c.controller.CreateVolume({
    name: 'pvc-1',
    volumeCapabilities: [
      { mount: { mountFlags: ['password=S3CRET-FLAG'] }, accessMode: { mode: 'SINGLE_NODE_WRITER' } },
    ],
    secrets: { token: 'S3CRET-TOKEN' },
    parameters: { storage: 'local-lvm', proxmoxPassword: 'S3CRET-PARAM' },
  });
  const all = lines.join('');
  t.match(all, /pvc-1/, 'the request was logged');
  t.match(all, /"code":"OK"/, 'a result line was logged');
  t.notMatch(all, /S3CRET/, 'no secret reached the log');
});
