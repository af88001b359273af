// The one keyed lock (src/locks.ts): waiting per key in order, refusing at once, no leaks.
import t from 'tap';
import { KeyedLock } from '../../src/locks.js';
import { isCsiError } from '../../src/errors.js';
import { rejection } from '../helpers/rejection.js';

const tick = () => new Promise((r) => setImmediate(r));

t.test('run: one call per key at a time, in arrival order; other keys in parallel', async (t) => {
  const lock = new KeyedLock();
  const log: string[] = [];
  let release!: () => void;
  const first = lock.run('v1', async () => {
    log.push('a start');
    await new Promise<void>((r) => (release = r));
    log.push('a end');
  });
  const second = lock.run('v1', async () => void log.push('b'));
  const other = lock.run('v2', async () => void log.push('other'));
  await other;
  await tick();
  t.same(log, ['a start', 'other'], 'the second v1 call waits; v2 does not');
  release();
  await Promise.all([first, second]);
  t.same(log, ['a start', 'other', 'a end', 'b']);
  t.notOk(lock.busy(), 'nothing left held');
});

t.test('run: a failure releases the key and reaches only its own caller', async (t) => {
  const lock = new KeyedLock();
  const failed = lock.run('v', async () => {
    throw new TypeError('boom');
  });
  const next = lock.run('v', async () => 'ok');
  await t.rejects(failed, TypeError);
  t.equal(await next, 'ok');
  t.notOk(lock.busy('v'));
});

t.test('run: overlapping key sets in opposite orders do not deadlock', async (t) => {
  const lock = new KeyedLock();
  const slow = async () => {
    await tick();
    return 1;
  };
  const results = await Promise.all([lock.run(['a', 'b'], slow), lock.run(['b', 'a'], slow), lock.run(['a'], slow)]);
  t.same(results, [1, 1, 1]);
});

t.test('run: more than 1000 waiters on one key (async-lock caps at 1000 by default)', async (t) => {
  const lock = new KeyedLock();
  let n = 0;
  await Promise.all(
    Array.from({ length: 1500 }, () =>
      lock.run('v', async () => {
        n++;
      }),
    ),
  );
  t.equal(n, 1500);
});

t.test('tryRun: a held key is refused at once with Busy (ABORTED), free keys run', async (t) => {
  const lock = new KeyedLock();
  let release!: () => void;
  const held = lock.tryRun(['csi/v1', 'csi/name:x'], () => new Promise<void>((r) => (release = r)));
  const refused = await rejection(lock.tryRun(['csi/other', 'csi/v1'], async () => 'ran'));
  t.ok(isCsiError(refused) && refused.kind === 'Aborted', 'Busy: ABORTED');
  t.match(refused.message, /csi\/v1 is already in progress/);
  t.notOk(lock.busy('csi/other'), 'a refused call takes none of its keys');
  t.equal(await lock.tryRun(['csi/v2'], async () => 'ran'), 'ran');
  t.equal(await lock.tryRun([], async () => 'no keys'), 'no keys');
  release();
  await held;
  t.equal(await lock.tryRun(['csi/v1'], async () => 'again'), 'again', 'free again once the holder is done');
  t.notOk(lock.busy());
});
