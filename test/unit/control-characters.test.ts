// One control-character rule for the whole program (src/control-characters.ts): it matches C0,
// DEL and C1 and nothing printable, every place that refuses control characters uses it (no
// second regex with its own range anywhere in src/), and the places that had their own narrower
// range now refuse the whole set.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONTROL_CHARACTER, hasControlCharacter } from '../../src/control-characters.js';
import { loadConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/config/errors.js';
import { parseCreateParams } from '../../src/nfs/controller/params.js';
import { isCsiError } from '../../src/errors.js';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src');

t.test('the rule: C0, DEL and C1, nothing printable', async (t) => {
  const all = Array.from({ length: 0x250 }, (_v, i) => String.fromCharCode(i));
  const matched = all.filter(hasControlCharacter).map((c) => c.charCodeAt(0));
  const want = [
    ...Array.from({ length: 0x20 }, (_v, i) => i),
    0x7f,
    ...Array.from({ length: 0x20 }, (_v, i) => 0x80 + i),
  ];
  t.same(matched, want);
  t.notOk(hasControlCharacter('pvc-1/ñ é #'), 'printable text passes');
});

t.test('no other control-character pattern in src/', async (t) => {
  const files = (dir: string): string[] =>
    fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) return e.name === 'gen' ? [] : files(p);
      return e.name.endsWith('.ts') ? [p] : [];
    });
  const own = path.join(SRC, 'control-characters.ts');
  // A character class starting at NUL, in any escape form: the signature of a control-character rule.
  const pattern = /\[[^\]]*\\(?:x00|u0000|0)-/;
  const found = files(SRC).filter((f) => f !== own && pattern.test(fs.readFileSync(f, 'utf8')));
  t.same(
    found.map((f) => path.relative(SRC, f)),
    [],
    'every check uses src/control-characters.ts',
  );
  t.ok(
    pattern.test(CONTROL_CHARACTER.source) || pattern.test(fs.readFileSync(own, 'utf8')),
    'the scan sees the rule itself',
  );
});

t.test('DEL and C1 are refused where a narrower range was used before', async (t) => {
  for (const dir of ['/var/lib/kube\x7flet', '/var/lib/kube\x85let'])
    t.throws(
      () => loadConfig(['--mode', 'node', '--nfs-endpoint', 'unix:///a', '--node-id', 'n', '--kubelet-dir', dir], {}),
      {
        constructor: ConfigError,
        message: /--kubelet-dir/,
      },
    );
  for (const server of ['nas\x7f.local', 'nas\x85.local']) {
    let err: unknown;
    try {
      parseCreateParams('pv-1', { server, share: '/export' }, 'delete');
    } catch (e) {
      err = e;
    }
    t.ok(isCsiError(err, 'InvalidArgument') && /server/.test(err.message), JSON.stringify(server));
  }
});
