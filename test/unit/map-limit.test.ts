// The one bounded map (src/map-limit.ts): results in the items' order, never more than `limit`
// calls at once, every item once, and the first failure is the answer.
import t from 'tap';
import { mapLimit } from '../../src/map-limit.js';

t.test('results keep the order, at most limit run at once', async (t) => {
  let running = 0;
  let most = 0;
  const seen: number[] = [];
  const out = await mapLimit([5, 1, 4, 2, 3, 0, 6], 3, async (n) => {
    running++;
    most = Math.max(most, running);
    seen.push(n);
    await new Promise((r) => setTimeout(r, n));
    running--;
    return n * 10;
  });
  t.same(out, [50, 10, 40, 20, 30, 0, 60]);
  t.equal(most, 3);
  t.same([...seen].sort(), [0, 1, 2, 3, 4, 5, 6]);
});

t.test('no items, a limit above the count, and a failure', async (t) => {
  t.same(await mapLimit([], 4, async () => 1), []);
  t.same(await mapLimit([1, 2], 10, async (n) => n + 1), [2, 3]);
  await t.rejects(
    mapLimit([1, 2, 3], 2, async (n) => {
      if (n === 2) throw new Error('two');
      return n;
    }),
    /two/,
  );
});
