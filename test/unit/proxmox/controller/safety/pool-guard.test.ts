// The thin-pool guard's decisions as a table, and the one property that ties its two answers
// together: a size is allowed exactly when it is within what GetCapacity would report.
import t from 'tap';
import fc from 'fast-check';
import {
  DEFAULT_POOL_GUARD,
  guardAllows,
  guardCheck,
  guardDecide,
  overcommitRatio,
  type PoolFigures,
  type PoolGuardSettings,
} from '../../../../../src/proxmox/controller/safety/pool-guard.js';

const GiB = 1024 ** 3;
const pool = (o: Partial<PoolFigures> = {}): PoolFigures => ({
  region: 'homelab',
  node: 'hyper1',
  storage: 'local-lvm',
  size: 100 * GiB,
  used: 0,
  provisionedAll: 0,
  provisionedOurs: 0,
  ...o,
});
const on = (o: Partial<PoolGuardSettings> = {}): PoolGuardSettings => ({ ...DEFAULT_POOL_GUARD, ...o });

t.test('decisions', async (t) => {
  const rows: Array<[string, PoolGuardSettings, PoolFigures, number, 'ok' | 'maxFill' | 'maxOvercommit', number]> = [
    // name, settings, pool, bytes, expected, what the guard still allows
    ['empty pool, small volume', on(), pool(), 10 * GiB, 'ok', 90 * GiB],
    ['written to 80 %: 10 GiB fits under 90 %', on(), pool({ used: 80 * GiB }), 10 * GiB, 'ok', 10 * GiB],
    ['written to 80 %: 11 GiB would pass 90 %', on(), pool({ used: 80 * GiB }), 11 * GiB, 'maxFill', 10 * GiB],
    ['already past the limit', on(), pool({ used: 95 * GiB }), 1, 'maxFill', 0],
    // Allocation alone fills nothing: a pool of big, empty volumes still takes more.
    [
      'over-provisioned but empty, no over-commit limit',
      on(),
      pool({ provisionedAll: 500 * GiB }),
      50 * GiB,
      'ok',
      90 * GiB,
    ],
    [
      'over-commit limit 2: 150 provisioned, 50 fits',
      on({ maxOvercommit: 2 }),
      pool({ provisionedAll: 150 * GiB }),
      50 * GiB,
      'ok',
      50 * GiB,
    ],
    [
      'over-commit limit 2: 51 does not',
      on({ maxOvercommit: 2 }),
      pool({ provisionedAll: 150 * GiB }),
      51 * GiB,
      'maxOvercommit',
      50 * GiB,
    ],
    ['fill limit off: only the pool size bounds', on({ maxFill: 0 }), pool({ used: 95 * GiB }), 5 * GiB, 'ok', 5 * GiB],
    [
      'guard off: nothing refused',
      on({ enabled: false }),
      pool({ used: 99 * GiB, provisionedAll: 900 * GiB }),
      50 * GiB,
      'ok',
      1 * GiB,
    ],
    ['zero bytes (a no-op growth) always passes', on(), pool({ used: 100 * GiB }), 0, 'ok', 0],
    ['an inactive pool (size 0) allows nothing', on(), pool({ size: 0 }), 1, 'maxFill', 0],
  ];
  for (const [name, s, p, bytes, want, allows] of rows) {
    const d = guardDecide(s, p, bytes, 'CreateVolume pvc-x');
    t.equal(d.ok ? 'ok' : d.limit, want, `${name}: decision`);
    t.equal(guardAllows(s, p), allows, `${name}: allows ${allows / GiB} GiB`);
  }
});

t.test('a refusal names the storage, the host, the figures and the setting', async (t) => {
  const p = pool({ used: 85 * GiB, node: 'hyper2', storage: 'fast-lvm' });
  let thrown: unknown;
  try {
    guardCheck(on(), p, 10 * GiB, 'CreateVolume pvc-1');
  } catch (e) {
    thrown = e;
  }
  t.match(thrown, { kind: 'ResourceExhausted' }, 'guardCheck throws RESOURCE_EXHAUSTED');
  const d = guardDecide(on(), p, 10 * GiB, 'CreateVolume pvc-1');
  t.notOk(d.ok);
  if (!d.ok) {
    t.match(d.message, /CreateVolume pvc-1/);
    t.match(d.message, /storage fast-lvm on host hyper2 \(cluster homelab\)/);
    t.match(d.message, /85\.0 GiB of 100\.0 GiB written \(85\.0 %\)/);
    t.match(d.message, /proxmox\.poolGuard\.maxFillPercent \(flag --pool-max-fill\)/);
    t.match(d.message, /allows 5\.0 GiB/);
  }
  const o = guardDecide(
    on({ maxOvercommit: 1.5 }),
    pool({ provisionedAll: 140 * GiB, provisionedOurs: 40 * GiB }),
    20 * GiB,
    'x',
  );
  if (!o.ok) {
    t.match(o.message, /140\.0 GiB in total \(40\.0 GiB of them this driver's\)/);
    t.match(o.message, /over-commit 1\.40/);
    t.match(o.message, /proxmox\.poolGuard\.maxOvercommit/);
  } else t.fail('over-commit refusal expected');
  t.equal(overcommitRatio(pool({ provisionedAll: 250 * GiB })), 2.5);
});

t.test('allowed exactly when within what the guard reports', async () => {
  const settings = fc.record({
    enabled: fc.boolean(),
    maxFill: fc.oneof(fc.constant(0), fc.double({ min: 0.05, max: 1, noNaN: true })),
    maxOvercommit: fc.oneof(fc.constant(0), fc.double({ min: 0.1, max: 10, noNaN: true })),
  });
  const figures = fc
    .record({ size: fc.integer({ min: 0, max: 2 ** 44 }), usedShare: fc.double({ min: 0, max: 1, noNaN: true }) })
    .chain(({ size, usedShare }) =>
      fc.record({
        size: fc.constant(size),
        used: fc.constant(Math.floor(size * usedShare)),
        provisionedAll: fc.integer({ min: 0, max: 2 ** 46 }),
      }),
    );
  fc.assert(
    fc.property(settings, figures, fc.integer({ min: 1, max: 2 ** 44 }), (s, f, bytes) => {
      const p = pool({ ...f, provisionedOurs: 0 });
      const ok = guardDecide(s, p, bytes, 'x').ok;
      const allows = guardAllows(s, p);
      // Off (or no limit set): nothing is refused, whatever it reports.
      if (!s.enabled || (s.maxFill === 0 && s.maxOvercommit === 0)) return ok;
      return ok === bytes <= allows;
    }),
  );
});
