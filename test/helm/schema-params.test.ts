// The chart's StorageClass parameter lists come from the drivers' own definitions
// (src/proxmox/param-keys.ts, src/nfs/param-keys.ts via scripts/gen-chart-schema.ts): every key a
// driver accepts is accepted by values.schema.json and every key the schema accepts is accepted
// by the driver, for both drivers; an unknown key is refused by both.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { regenerate, SCHEMA_FILE } from '../../scripts/gen-chart-schema.js';
import { PROXMOX_PARAMETERS } from '../../src/proxmox/param-keys.js';
import { NFS_PARAMETERS } from '../../src/nfs/param-keys.js';
import { parseCreateParameters } from '../../src/proxmox/controller/params/params.js';
import { parseCreateParams } from '../../src/nfs/controller/params.js';
import { isCsiError } from '../../src/errors.js';
import { PROXMOX_DRIVER_NAME } from '../../src/proxmox/contract.js';
import { NFS_DRIVER_NAME } from '../../src/nfs/contract.js';
import { present } from '../helpers/present.js';
import { NFS_EXAMPLES, PROXMOX_EXAMPLES } from '../helpers/storage-class-examples.js';
import { render, renderError } from './helm.js';

const schema = JSON.parse(fs.readFileSync(SCHEMA_FILE, 'utf8')) as {
  definitions: Record<string, { properties: Record<string, unknown> }>;
};
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'schema-params-'));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));
const valuesFile = (v: unknown) => {
  const f = path.join(tmp, `v${fs.readdirSync(tmp).length}.yaml`);
  fs.writeFileSync(f, stringify(v));
  return f;
};

t.test('values.schema.json is what scripts/gen-chart-schema.ts generates', async (t) => {
  const text = fs.readFileSync(SCHEMA_FILE, 'utf8');
  t.ok(regenerate(text) === text, 'up to date (else run: npx tsx scripts/gen-chart-schema.ts)');
});

for (const [driver, defs, examples, def, accepts] of [
  [
    PROXMOX_DRIVER_NAME,
    PROXMOX_PARAMETERS,
    PROXMOX_EXAMPLES,
    'proxmoxParameters',
    (p: Record<string, string>) => parseCreateParameters(p),
  ],
  [
    NFS_DRIVER_NAME,
    NFS_PARAMETERS,
    NFS_EXAMPLES,
    'nfsParameters',
    (p: Record<string, string>) => parseCreateParams('pv-1', p, 'delete'),
  ],
] as const) {
  t.test(`${driver}: driver keys = schema keys, each accepted by both`, async (t) => {
    t.same(
      Object.keys(present(schema.definitions[def], `definitions.${def} in the schema`).properties).sort(),
      Object.keys(defs).sort(),
      'the schema lists exactly the driver keys',
    );
    t.same(Object.keys(examples).sort(), Object.keys(defs).sort(), 'every driver key has an example in this test');
    t.doesNotThrow(() => accepts({ ...examples }), 'the driver accepts every key at once');
    const err = (() => {
      try {
        accepts({ ...examples, colour: 'blue' });
      } catch (e) {
        return isCsiError(e, 'InvalidArgument') ? e.message : String(e);
      }
      return 'accepted';
    })();
    t.match(err, /colour/, 'the driver refuses an unknown key by name');

    const cls = (parameters: Record<string, string>) =>
      driver === NFS_DRIVER_NAME
        ? { nfs: { storageClasses: [{ name: 'c', parameters }] } }
        : { proxmox: { storageClasses: [{ name: 'c', parameters }] } };
    const r = render({ valuesFiles: [valuesFile(cls(examples))] });
    const sc = r.all('StorageClass').find((o) => o.metadata.name === 'c') as unknown as {
      parameters: Record<string, string>;
    };
    for (const k of Object.keys(examples)) t.equal(sc.parameters[k], examples[k], `the chart renders ${k}`);
    t.match(
      renderError({ valuesFiles: [valuesFile(cls({ ...examples, colour: 'blue' }))] }),
      /colour/,
      'the schema refuses an unknown key by name',
    );
  });
}
