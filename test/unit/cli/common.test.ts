import t from 'tap';
import {
  EXIT,
  formatAge,
  formatBytes,
  parseAge,
  parseFlags,
  runCommand,
  table,
  UsageError,
  RefusedError,
} from '../../../src/cli/common.js';

t.test('parseAge: units, sums, and refusals', (t) => {
  t.equal(parseAge('90d', 'older-than'), 90 * 86400e3);
  t.equal(parseAge('1d12h', 'older-than'), 36 * 3600e3);
  t.equal(parseAge('2w', 'x'), 14 * 86400e3);
  for (const bad of ['', '90', 'd', '90x', '1d 2h', '-1d', '1.5d'])
    t.throws(() => parseAge(bad, 'older-than'), UsageError, bad);
  t.end();
});

t.test('formatAge and formatBytes', (t) => {
  t.equal(formatAge(0), '0s');
  t.equal(formatAge(90 * 86400e3 + 3 * 3600e3 + 5000), '90d3h');
  t.equal(formatAge(5 * 60e3), '5m');
  t.equal(formatBytes(300), '300 B');
  t.equal(formatBytes(1536), '1.5 KiB');
  t.equal(formatBytes(10 * 1024 ** 3), '10 GiB');
  t.equal(formatBytes(undefined), '?');
  t.end();
});

t.test('table: aligned columns, "-" for empty cells, no trailing padding', (t) => {
  t.equal(
    table(
      ['KIND', 'WHAT'],
      [
        ['orphan', 'local-lvm:vm-9999-pvc-1'],
        ['x', ''],
      ],
    ),
    'KIND    WHAT\norphan  local-lvm:vm-9999-pvc-1\nx       -\n',
  );
  t.end();
});

t.test('parseFlags: common flags, config secret, bad usage', (t) => {
  const p = parseFlags(
    'report',
    ['--json', '--yes', '--config-secret', 'csi-proxmox/proxmox-csi-plugin', '--timeout', '30s', '--fix'],
    { fix: { type: 'boolean' } },
  );
  t.same(p.common, {
    json: true,
    yes: true,
    help: false,
    timeoutMs: 30_000,
    configSecret: { namespace: 'csi-proxmox', name: 'proxmox-csi-plugin', key: 'config.yaml' },
  });
  t.equal(p.values.fix, true);
  t.same(parseFlags('x', ['--config-secret', 'a/b:cfg.yaml']).common.configSecret, {
    namespace: 'a',
    name: 'b',
    key: 'cfg.yaml',
  });
  t.throws(() => parseFlags('report', ['--nope']), { message: /see report --help/ });
  t.throws(() => parseFlags('report', ['extra']), UsageError);
  t.throws(() => parseFlags('report', ['--config-secret', 'noslash']), UsageError);
  t.throws(() => parseFlags('report', ['--timeout', 'soon']), UsageError);
  t.same(parseFlags('move', ['ns/pvc'], {}, { positionals: 1 }).positionals, ['ns/pvc']);
  t.end();
});

t.test('runCommand maps errors to the documented exit codes', async (t) => {
  const chunks: string[] = [];
  const w = { write: (s: string) => (chunks.push(s), true) } as unknown as NodeJS.WritableStream;
  const io = { out: w, err: w, env: {} };
  t.equal(await runCommand('x', io, () => Promise.resolve(EXIT.FINDINGS)), 1);
  t.equal(
    await runCommand('x', io, () => {
      throw new UsageError('bad');
    }),
    EXIT.USAGE,
  );
  t.equal(
    await runCommand('x', io, () => {
      throw new RefusedError('attached');
    }),
    EXIT.REFUSED,
  );
  t.equal(
    await runCommand('x', io, () => {
      throw new Error('boom');
    }),
    EXIT.FAILED,
  );
  t.match(chunks.join(''), /pve-nfs-csi x: bad\n.*attached\n.*boom\n/s);
});
