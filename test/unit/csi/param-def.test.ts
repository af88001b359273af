// One list of boolean spellings for both drivers (src/csi/param-def.ts): the Proxmox parameters,
// the mutable parameters and the node's `encrypted` volume-context key all read it, and no other
// copy of the list is left in src/.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BOOL_FALSE, BOOL_TRUE, boolSpelling } from '../../../src/csi/param-def.js';
import { parseCreateParameters } from '../../../src/proxmox/controller/params/params.js';
import { parseMutableParameters } from '../../../src/proxmox/controller/params/mutable.js';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../src');

t.test('the spellings of Go strconv.ParseBool', async (t) => {
  for (const v of BOOL_TRUE) t.equal(boolSpelling(v), true, v);
  for (const v of BOOL_FALSE) t.equal(boolSpelling(v), false, v);
  for (const v of ['', 'yes', 'on', 'tRuE', ' true']) t.equal(boolSpelling(v), undefined, JSON.stringify(v));
});

t.test('StorageClass and mutable parameters accept exactly those spellings', async (t) => {
  for (const v of [...BOOL_TRUE, ...BOOL_FALSE]) {
    t.equal(parseCreateParameters({ storage: 'local-lvm', ssd: v }).ssd, boolSpelling(v), `ssd ${v}`);
    t.equal(parseMutableParameters({ backup: v }).backup, boolSpelling(v), `backup ${v}`);
  }
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', ssd: 'yes' }), /ssd/);
  t.throws(() => parseMutableParameters({ backup: 'yes' }), /backup/);
});

t.test('no other copy of the list in src/', async (t) => {
  const files = (dir: string): string[] =>
    fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) return e.name === 'gen' ? [] : files(p);
      return e.name.endsWith('.ts') ? [p] : [];
    });
  const own = path.join(SRC, 'csi', 'param-def.ts');
  const found = files(SRC).filter(
    (f) => f !== own && /'t', 'T'|'f', 'F'|\['1', 't'|\['0', 'f'/.test(fs.readFileSync(f, 'utf8')),
  );
  t.same(
    found.map((f) => path.relative(SRC, f)),
    [],
  );
});
