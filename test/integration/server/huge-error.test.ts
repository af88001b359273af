// Regression (chaos suite, bad input): an error message that repeats a hostile 1 MiB volume id
// went out whole as the gRPC status message. It travels in an HTTP/2 trailer, far over the
// header limits, so the caller got no answer before its deadline and the calls that followed
// on the same connection (a sidecar has one for every volume) hung as well.
import t from 'tap';
import { status } from '@grpc/grpc-js';
import { NotFound } from '../../../src/errors.js';
import { mapError, MAX_STATUS_MESSAGE } from '../../../src/server/status.js';
import type { VolumeCapability } from '../../helpers/csi-client.js';
import { serveDriver } from '../../helpers/driver-server.js';
import { testDriver } from '../../helpers/test-driver.js';

const driver = testDriver({
  controller: {
    // Requests cannot carry a megabyte-long id any more (limits.ts); the message grows here
    // instead, as one that repeats a long value or a backend's whole answer would.
    validateVolumeCapabilities: async (req) => {
      throw new NotFound(`volume ${req.volumeId === 'huge' ? 'x'.repeat(1 << 20) : req.volumeId} does not exist`);
    },
  },
});
const cap: VolumeCapability = { mount: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

t.test('a huge id in an error message is cut, and the connection keeps working', async (t) => {
  const { c } = await serveDriver(t, driver, { mode: 'controller', clientTimeoutMs: 5000 });
  const started = Date.now();
  const err = await c.controller
    .ValidateVolumeCapabilities({ volumeId: 'huge', volumeCapabilities: [cap] })
    .catch((e: unknown) => e);
  t.match(err, { code: status.NOT_FOUND, details: /^volume x+… \(\d+ more characters\) does not exist$|^volume x+…/ });
  t.ok((err as { details: string }).details.length <= MAX_STATUS_MESSAGE + 40, 'the message is bounded');
  t.ok(Date.now() - started < 4000, 'answered at once, not at the deadline');
  await t.rejects(c.controller.ValidateVolumeCapabilities({ volumeId: 'small', volumeCapabilities: [cap] }), {
    code: status.NOT_FOUND,
    details: 'volume small does not exist',
  });
});

t.test('mapError keeps short messages as they are and cuts long ones', async (t) => {
  t.equal(mapError(new NotFound('short')).message, 'short');
  const m = mapError(new NotFound('y'.repeat(10_000))).message;
  t.ok(m.length < MAX_STATUS_MESSAGE + 40);
  t.match(m, /…/);
  t.match(mapError(new Error('z'.repeat(10_000))).message, /^internal error: z+…/);
});
