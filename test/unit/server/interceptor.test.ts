// The per-call wrapper (src/server/interceptor.ts): a finished call must leave nothing behind.
// Its deadline timer used to stay armed until the deadline passed, and its closure kept the
// whole call (request, HTTP/2 stream, logger) alive: with a 2-minute sidecar timeout and calls
// finishing in milliseconds, every call of the last two minutes stayed in the heap (bench/rss.ts:
// the live heap grew ~11 KB per call, a 24 MiB old space ran out after ~1,500 operations).
import t from 'tap';
import { EventEmitter } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { KeyedLock } from '../../../src/locks.js';
import { unary } from '../../../src/server/interceptor.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

interface Req {
  name: string;
}
interface Res {
  ok: boolean;
}

/** Runs one unary call with a deadline an hour away; returns a WeakRef to the call object. */
async function oneCall(fail: boolean): Promise<WeakRef<object>> {
  const handler = unary<Req, Res>(
    { driver: 'test.csi', log: pino({ level: 'silent' }), locks: new KeyedLock(), inflight: { n: 0 } },
    {
      method: 'CreateVolume',
      requestType: 'csi.v1.CreateVolumeRequest',
      impl: (req) => (fail ? Promise.reject(new Error(`no ${req.name}`)) : Promise.resolve({ ok: true })),
    },
  );
  const call = Object.assign(new EventEmitter(), {
    request: { name: 'pvc-1' },
    getDeadline: () => new Date(Date.now() + 3_600_000),
  });
  const ref = new WeakRef(call);
  await new Promise<void>((resolve) =>
    handler(call as unknown as grpc.ServerUnaryCall<Req, Res>, () => {
      resolve();
    }),
  );
  return ref;
}

for (const fail of [false, true]) {
  t.test(`a ${fail ? 'failed' : 'finished'} call with a distant deadline is not kept alive`, async (t) => {
    const ref = await oneCall(fail);
    for (let i = 0; i < 3 && ref.deref(); i++) {
      await new Promise((r) => setImmediate(r));
      gc();
    }
    t.equal(ref.deref(), undefined, 'the call object was collected');
  });
}
