// docs/parameters.md is generated from the drivers' parameter definitions
// (scripts/gen-parameters-doc.ts), and the chart's own reference (docs/helm.md) names every key of
// each driver in its storageClasses row, so neither can drift from src/*/param-keys.ts again.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { PARAMETERS_DOC, render } from '../../../scripts/gen-parameters-doc.js';
import { PROXMOX_PARAMETERS } from '../../../src/proxmox/param-keys.js';
import { NFS_PARAMETERS } from '../../../src/nfs/param-keys.js';

t.test('docs/parameters.md is what scripts/gen-parameters-doc.ts generates', async (t) => {
  t.ok(
    render() === fs.readFileSync(PARAMETERS_DOC, 'utf8'),
    'up to date (else run: npx tsx scripts/gen-parameters-doc.ts)',
  );
  for (const key of [...Object.keys(PROXMOX_PARAMETERS), ...Object.keys(NFS_PARAMETERS)])
    t.match(render(), `| \`${key}\` |`, key);
});

t.test('docs/helm.md names every key of each driver in its storageClasses row', async (t) => {
  const helm = fs.readFileSync(path.join(path.dirname(PARAMETERS_DOC), 'helm.md'), 'utf8').split('\n');
  for (const [row, defs] of [
    ['| `proxmox.storageClasses` |', PROXMOX_PARAMETERS],
    ['| `nfs.storageClasses` |', NFS_PARAMETERS],
  ] as const) {
    const line = helm.find((l) => l.startsWith(row)) ?? '';
    t.ok(line, `${row} is in docs/helm.md`);
    t.same(
      Object.keys(defs).filter((k) => !line.includes(`\`${k}\``)),
      [],
      `${row} names every key`,
    );
  }
});
