// What snapshots, restores and clones need beyond the CSI role (docs/proxmox-setup.md), as
// preflight reports it: a token without VM.Migrate is told so, since a restore or clone into
// another zone migrates its volume VM; without VM.Config.Options, since the copy VM is created
// with a name and a description.
import t from 'tap';
import { SNAPSHOT_PRIVILEGES, missingNeeds, snapshotNeeds } from '../../../src/cli/privileges.js';

const csiRole = {
  'VM.Audit': 1,
  'VM.Config.Disk': 1,
  'Datastore.Allocate': 1,
  'Datastore.AllocateSpace': 1,
  'Datastore.Audit': 1,
};

t.test(
  'VM.Allocate, VM.Config.Options, VM.Snapshot, VM.Clone and VM.Migrate beyond the CSI role, on /vms',
  async (t) => {
    const missing = missingNeeds({ '/': csiRole }, snapshotNeeds(9999));
    t.same(
      missing.map((n) => `${n.privilege} on ${n.path}`),
      [
        'VM.Allocate on /vms',
        'VM.Config.Options on /vms',
        'VM.Snapshot on /vms',
        'VM.Clone on /vms',
        'VM.Migrate on /vms',
      ],
    );
    t.match(missing.at(-1)?.why, /another zone/);
    const without = { ...csiRole, 'VM.Allocate': 1, 'VM.Config.Options': 1, 'VM.Snapshot': 1, 'VM.Clone': 1 };
    t.same(
      missingNeeds({ '/': without }, snapshotNeeds(9999)).map((n) => n.privilege),
      ['VM.Migrate'],
      'a token granted what snapshots needed before lacks only VM.Migrate',
    );
    t.same(missingNeeds({ '/': { ...without, 'VM.Migrate': 1 } }, snapshotNeeds(9999)), []);
    t.ok(SNAPSHOT_PRIVILEGES.includes('VM.Migrate'), 'the role list the tests and docs grant');
  },
);
