// The per-key batcher: a lone item starts at once (no fixed wait), items arriving while a batch
// runs go into the next one or are taken late by the running batch, in order.
import t from 'tap';
import { Batcher } from '../../../../../src/proxmox/controller/attach/batcher.js';

const tick = () => new Promise((r) => setTimeout(r, 0));

t.test('a lone item starts its batch without waiting for company', async (t) => {
  // No clock: the batch must have run by the first zero-delay timer, which a merge window of
  // any length (the old fixed 5 ms) would not have. A wall-clock bound failed on a loaded machine.
  const seen: Array<[string, number[]]> = [];
  const b = new Batcher<string, number>(async (key, items) => {
    seen.push([key, items]);
    await Promise.resolve();
  });
  b.add('vm', 1);
  await tick();
  t.same(seen, [['vm', [1]]], 'started at once');
});

t.test('items added in the same turn share a batch; later ones wait for the next', async (t) => {
  const batches: number[][] = [];
  let release: () => void = () => undefined;
  const b = new Batcher<string, number>(async (_key, items) => {
    batches.push(items);
    if (batches.length === 1) await new Promise<void>((r) => (release = r));
  });
  b.add('vm', 1);
  b.add('vm', 2);
  await tick();
  b.add('vm', 3);
  b.add('vm', 4);
  t.ok(b.has('vm'));
  release();
  await tick();
  await tick();
  t.same(batches, [
    [1, 2],
    [3, 4],
  ]);
  await tick();
  t.notOk(b.has('vm'), 'idle again');
});

t.test('takeLate: the running batch takes what arrived since, only when all of it fits', async (t) => {
  const taken: number[][] = [];
  let gate: () => void = () => undefined;
  const b = new Batcher<string, number>(async (key, items) => {
    await new Promise<void>((r) => (gate = r));
    taken.push([...items, ...b.takeLate(key, (x) => x % 2 === 1)]);
  });
  /** `first` starts a batch, `late` arrive while it runs, then it is let go. */
  const batch = async (first: number, ...late: number[]) => {
    b.add('vm', first);
    await tick();
    for (const x of late) b.add('vm', x);
    gate();
    await tick();
  };
  await batch(1, 3, 5);
  t.same(taken, [[1, 3, 5]], 'odd newcomers joined the running batch');
  await batch(7, 8, 9);
  t.same(taken[1], [7], 'an item that does not fit keeps the queue in order: nothing taken');
  gate();
  await tick();
  t.same(taken[2], [8, 9], 'the next batch has them');
  t.same(
    b.takeLate('other', () => true),
    [],
    'an idle key has nothing late',
  );
});

t.test('a runner that throws does not stop the key', async (t) => {
  const seen: number[] = [];
  const b = new Batcher<string, number>(async (_key, items) => {
    seen.push(...items);
    await Promise.resolve();
    if (items.includes(1)) throw new Error('boom');
  });
  b.add('vm', 1);
  await tick();
  b.add('vm', 2);
  await tick();
  await tick();
  t.same(seen, [1, 2]);
});
