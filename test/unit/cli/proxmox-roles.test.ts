// One source for what the Proxmox token needs: the roles (src/proxmox/roles.ts), the needs
// preflight, report and move check (src/cli/privileges.ts), the pveum commands
// docs/proxmox-setup.md shows, and the simulator's CSI role. Creating a copy VM or the mover VM
// sends `name` and `description`, which qemu-server 9 checks against VM.Config.Options.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import {
  SNAPSHOT_PRIVILEGES,
  missingMovePrivileges,
  missingNeeds,
  moveNeeds,
  proxmoxSetupCommands,
  snapshotNeeds,
} from '../../../src/cli/privileges.js';
import { BASE_ROLE, MOVE_ROLE, SNAPSHOT_ROLE } from '../../../src/proxmox/index.js';
import { ALL_PRIVILEGES, BUILTIN_ROLES } from '../../../sim/model/privileges.js';

const DOC = path.resolve(import.meta.dirname, '../../../docs/proxmox-setup.md');
const grant = (privs: readonly string[]) => Object.fromEntries(privs.map((p) => [p, 1]));

/** The fenced block after `<!-- pveum:NAME … -->`, one command a line. */
function docBlock(doc: string, name: string): string[] {
  const at = doc.indexOf(`<!-- pveum:${name}`);
  if (at < 0) return [];
  const m = /```sh\n([\s\S]*?)```/.exec(doc.slice(at));
  return (m?.[1] ?? '').split('\n').filter(Boolean);
}

t.test('docs/proxmox-setup.md shows exactly the generated pveum commands', async (t) => {
  const doc = fs.readFileSync(DOC, 'utf8');
  const cmds = proxmoxSetupCommands();
  for (const name of ['base', 'snapshots', 'move'] as const) t.same(docBlock(doc, name), cmds[name], name);
  t.match(cmds.base.join('\n'), /--privsep 1/, 'the token has privilege separation');
  t.match(cmds.move.join('\n'), /acl modify \/vms\/9999 /, "move's role only on the controller VMID");
  t.match(proxmoxSetupCommands({ controllerVmId: 4242 }).move.join('\n'), /\/vms\/4242 /);
});

t.test('the needs are the roles: base + snapshots for snapshots, base + move for move', async (t) => {
  const set = (a: Iterable<string>) => [...new Set(a)].sort();
  t.same(set(snapshotNeeds(9999).map((n) => n.privilege)), set([...BASE_ROLE.privileges, ...SNAPSHOT_ROLE.privileges]));
  t.same(
    set(moveNeeds(9999, 'local-lvm').map((n) => n.privilege)),
    set([...BASE_ROLE.privileges, ...MOVE_ROLE.privileges]),
  );
  t.same(set(SNAPSHOT_PRIVILEGES), set([...BASE_ROLE.privileges, ...SNAPSHOT_ROLE.privileges]));
  t.same(set(BUILTIN_ROLES.CSI ?? []), set(BASE_ROLE.privileges), "the simulator's CSI role is the base role");
  for (const p of [...BASE_ROLE.privileges, ...SNAPSHOT_ROLE.privileges, ...MOVE_ROLE.privileges])
    t.ok(ALL_PRIVILEGES.includes(p), `${p} exists in Proxmox VE 9`);
});

t.test('VM.Config.Options: a token made from the old role list is told what it lacks', async (t) => {
  const old = grant([...BASE_ROLE.privileges, 'VM.Allocate', 'VM.Snapshot', 'VM.Clone', 'VM.Migrate']);
  t.same(
    missingNeeds({ '/vms': old, '/storage': old }, snapshotNeeds(9999)).map((n) => `${n.privilege} on ${n.path}`),
    ['VM.Config.Options on /vms'],
  );
  t.same(missingMovePrivileges({ '/': old }, 9999, 'local-lvm'), [
    'VM.Config.Options on /vms/9999 (give the helper VM its name and description at creation)',
  ]);
  const roles = grant([...BASE_ROLE.privileges, ...SNAPSHOT_ROLE.privileges]);
  t.same(missingNeeds({ '/vms': roles, '/storage': roles }, snapshotNeeds(9999)), [], 'the documented ACLs suffice');
  const move = grant(MOVE_ROLE.privileges);
  const base = grant(BASE_ROLE.privileges);
  t.same(
    missingMovePrivileges({ '/vms': base, '/storage': base, '/vms/9999': { ...base, ...move } }, 9999, 'local-lvm'),
    [],
  );
});

t.test('a deeper ACL replaces what a parent grants (GET /access/permissions resolves each path)', async (t) => {
  const base = grant(BASE_ROLE.privileges);
  const moveOnly = grant(MOVE_ROLE.privileges);
  t.same(
    missingMovePrivileges({ '/vms': base, '/storage': base, '/vms/9999': moveOnly }, 9999, 'local-lvm').map(
      (l) => l.split(' (')[0],
    ),
    ['VM.Audit on /vms/9999', 'VM.Config.Disk on /vms/9999'],
    'CSIMove alone on /vms/9999 hides the base role there',
  );
  t.same(missingNeeds({ '/vms': { 'VM.Audit': 0 } }, [{ path: '/vms/101', privilege: 'VM.Audit', why: '' }]).length, 1);
  t.same(missingNeeds({ '/vms': { 'VM.Audit': 0 } }, [{ path: '/vms', privilege: 'VM.Audit', why: '' }]), []);
});

t.test("the chart's values name the roles' privileges", async (t) => {
  const values = fs.readFileSync(path.resolve(import.meta.dirname, '../../../charts/pve-nfs-csi/values.yaml'), 'utf8');
  const comment = values.replace(/\n\s*#\s*/g, ' ');
  t.match(comment, `${BASE_ROLE.privileges.join(' ')} on /vms and /storage`);
  t.match(comment, `${SNAPSHOT_ROLE.privileges.join(' ')} on /vms`);
  t.match(comment, `${SNAPSHOT_ROLE.privileges.join(', ')} on /vms`);
});
