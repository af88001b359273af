// Regression (chaos suite, bad input): ids and node paths of any length reached the backends; an
// 80 KB target path kept a node call busy past its deadline. Every RPC now refuses ids over
// 4 KiB and paths over PATH_MAX with INVALID_ARGUMENT before anything else runs.
import t from 'tap';
import { status } from '@grpc/grpc-js';
import { checkLimits, MAX_PATH_BYTES } from '../../../src/server/limits.js';
import { serveDriver } from '../../helpers/driver-server.js';
import { testDriver } from '../../helpers/test-driver.js';

let reached = 0;
const driver = testDriver({
  controller: {
    deleteVolume: async () => {
      reached++;
      return {};
    },
  },
  node: {
    capabilities: [],
    nodeGetInfo: async () => ({ nodeId: 'n' }),
    nodePublishVolume: async () => ({}),
    nodeUnpublishVolume: async () => {
      reached++;
      // What a path walk over a huge path did: it took longer than the caller waited.
      await new Promise((r) => setTimeout(r, 3000));
      return {};
    },
  },
});

t.test('huge ids and paths are refused before a backend sees them', async (t) => {
  const { c } = await serveDriver(t, driver, { clientTimeoutMs: 2000 });
  await t.rejects(c.controller.DeleteVolume({ volumeId: 'x'.repeat(1 << 20) }), {
    code: status.INVALID_ARGUMENT,
    details: /volume_id is 1048576 bytes long; at most 4096/,
  });
  await t.rejects(
    c.node.NodeUnpublishVolume({ volumeId: 'v', targetPath: `/var/lib/kubelet/${'a/'.repeat(40_000)}` }),
    { code: status.INVALID_ARGUMENT, details: /target_path is \d+ bytes long/ },
  );
  t.equal(reached, 0, 'no backend was called');
  await c.controller.DeleteVolume({ volumeId: 'ordinary' });
  t.equal(reached, 1, 'ordinary ids pass');
});

t.test('limits count bytes, and only ids and paths', async (t) => {
  t.doesNotThrow(() => checkLimits({ targetPath: `/${'a'.repeat(MAX_PATH_BYTES - 1)}` }, 'M'));
  t.throws(
    () => checkLimits({ targetPath: `/${'é'.repeat(MAX_PATH_BYTES / 2)}` }, 'M'),
    /target_path is \d+ bytes long/,
  );
  t.doesNotThrow(() => checkLimits({ parameters: { k: 'v'.repeat(10_000) }, other: 'x'.repeat(10_000) }, 'M'));
});
