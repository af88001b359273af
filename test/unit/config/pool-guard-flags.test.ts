// The thin-pool guard's, the Node topology labels' and the findings metrics' flags: defaults, the off switch, and refusals
// that name the flag.
import t from 'tap';
import { loadConfig } from '../../../src/config/load.js';
import { ConfigError } from '../../../src/config/errors.js';

const base = ['--mode', 'node', '--nfs-endpoint', 'unix:///a', '--node-id', 'n'];
const run = (args: string[], env: NodeJS.ProcessEnv = {}) => {
  const r = loadConfig([...base, ...args], env);
  if (r.kind !== 'run') throw new Error('not a run');
  return r.config;
};

t.test('defaults: guard on at 90 %, no over-commit limit; findings every 5 min, 30 calls a minute', async (t) => {
  const c = run([]);
  t.same(c.poolGuard, { enabled: true, maxFill: 0.9, maxOvercommit: 0 });
  t.same(c.findings, { intervalMs: 300_000, callsPerMinute: 30 });
});

t.test('the chart flags and their environment', async (t) => {
  t.same(run(['--pool-guard', 'off', '--pool-max-fill', '80', '--pool-max-overcommit', '2.5']).poolGuard, {
    enabled: false,
    maxFill: 0.8,
    maxOvercommit: 2.5,
  });
  t.equal(run([], { PROXMOX_POOL_MAX_FILL: '0' }).poolGuard.maxFill, 0, 'env; 0 = no fill limit');
  t.same(run(['--findings-interval', '0', '--findings-call-budget', '12']).findings, {
    intervalMs: 0,
    callsPerMinute: 12,
  });
});

t.test('Node topology labels: on unless turned off, by flag or environment', async (t) => {
  t.equal(run([]).nodeTopologyLabels, true);
  t.equal(run(['--node-topology-labels', 'off']).nodeTopologyLabels, false);
  t.equal(run([], { PROXMOX_NODE_TOPOLOGY_LABELS: 'false' }).nodeTopologyLabels, false);
});

t.test('refusals name the flag', async (t) => {
  for (const [args, flag] of [
    [['--pool-guard', 'maybe'], '--pool-guard'],
    [['--node-topology-labels', 'sometimes'], '--node-topology-labels'],
    [['--pool-max-fill', '120'], '--pool-max-fill'],
    [['--pool-max-fill', '-5'], '--pool-max-fill'],
    [['--pool-max-overcommit', '0.01'], '--pool-max-overcommit'],
    [['--findings-call-budget', '0'], '--findings-call-budget'],
  ] as const) {
    t.throws(() => run([...args]), new ConfigError(''), `${args.join(' ')} is refused`);
    try {
      run([...args]);
    } catch (e) {
      t.match((e as Error).message, flag);
    }
  }
});
