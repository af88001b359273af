// The day-2 ownership rule (docs/ownership-day2.md) on the cases where `report --fix --yes` and
// `archives prune --yes` removed live data: one named test per observed case, over facts built
// by hand. The same cases run against a real kube-apiserver, the simulator and ganesha in
// test/k8s/cli/ownership.test.ts.
import t from 'tap';
import { proxmoxFindings, type Finding } from '../../../src/cli/report/findings.js';
import { archiveVerdicts, nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { layoutOf, relate } from '../../../src/cli/report/layout.js';
import {
  clusterFacts,
  dynamicNfsPv,
  HOUR,
  inTreeNfsPv,
  kube,
  NOW,
  NSPV,
  NSPVC,
  nfsClass,
  nfsFacts,
  proxmoxPv,
  rules,
  staticNfsPv,
  uid,
} from './day2-fixtures.js';

const OLD = 48 * HOUR;
const SHARE = '/volume1/k8s-volumes';
const TALOS = `${SHARE}/talos`;
const removed = (fs: Finding[]) => fs.filter((f) => f.action).map((f) => f.what);
// A live claim elsewhere on the server: the view is one that owns the share.
const owner = dynamicNfsPv('pvc-owner', '127.0.0.1', TALOS, 'other/keep');

t.test('case 10: non-claim data that fits <ns>/<pvc> is never removed', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('syno', TALOS, NSPVC, 'delete')],
    dirs: [
      ['127.0.0.1', `${TALOS}/photos/2023`, OLD],
      ['127.0.0.1', `${TALOS}/backups/nightly`, OLD],
    ],
  });
  const f = nfsFindings(facts, kube({ pvs: [owner] }), rules);
  t.same(removed(f), [], 'nothing removable');
  t.match(f[0]?.kept, /does not prove a provisioned claim/);
  t.end();
});

t.test('case 10: a class without subDir owns only top-level pvc-<uid> directories', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('flat', TALOS, undefined, 'delete')],
    dirs: [
      ['127.0.0.1', `${TALOS}/media`, OLD],
      ['127.0.0.1', `${TALOS}/pvc-${uid(1)}`, OLD],
    ],
  });
  const f = nfsFindings(facts, kube({ pvs: [owner] }), rules);
  t.same(removed(f), [`pvc-${uid(1)}`], 'the provisioned name only');
  t.match(f.find((x) => x.what === 'media')?.kept, /no class lays out a claim there/);
  t.equal(relate(layoutOf(undefined), 'photos'), 'unrelated', 'nothing but pvc-<uid> is in its layout');
  t.equal(relate(layoutOf(undefined), `pvc-${uid(1)}/data`), 'inside-claim');
  t.end();
});

t.test('case 11: a flat delete class next to a <ns>/<pvc> retain class keeps the namespace directory', (t) => {
  for (const flat of [undefined, '${pvc.metadata.name}', '${pv.metadata.name}']) {
    const facts = nfsFacts({
      classes: [nfsClass('nested', TALOS, NSPVC, 'retain'), nfsClass('flat', TALOS, flat, 'delete')],
      dirs: [
        ['127.0.0.1', `${TALOS}/media`, OLD],
        ['127.0.0.1', `${TALOS}/media/old-config`, OLD],
      ],
    });
    const f = nfsFindings(facts, kube({ pvs: [owner] }), rules);
    t.same(removed(f), [], `flat subDir ${flat ?? '(none)'}`);
    t.match(f.find((x) => x.what === 'media')?.kept, /holds claims of class nested/);
  }
  t.end();
});

t.test('case 11: nested shares: the outer class keeps the inner claim and the inner share root', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('outer', SHARE, NSPV, 'delete'), nfsClass('inner', TALOS, NSPVC, 'delete')],
    dirs: [
      ['127.0.0.1', `${SHARE}/talos/media`, OLD],
      ['127.0.0.1', `${SHARE}/talos/pvc-${uid(2)}`, OLD],
    ],
  });
  const live = dynamicNfsPv('pvc-app', '127.0.0.1', TALOS, 'media/app');
  const f = nfsFindings(facts, kube({ pvs: [live] }), rules);
  t.same(removed(f), [], 'nothing');
  t.notOk(
    f.some((x) => x.what === 'talos/media'),
    'the live claim below it makes talos/media no leftover at all',
  );
  t.match(f.find((x) => x.what === `talos/pvc-${uid(2)}`)?.kept, /holds claims of class inner/);
  t.equal(relate(layoutOf(NSPVC), undefined), 'share', 'a share root (or above) relates as the share');
  t.end();
});

t.test('case 11: a removal opens the innermost share, so empty parents stop at its root', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('outer', SHARE, '${pv.metadata.name}', 'retain'), nfsClass('inner', TALOS, NSPV, 'delete')],
    dirs: [['127.0.0.1', `${TALOS}/apps/pvc-${uid(3)}`, OLD]],
  });
  const f = nfsFindings(facts, kube({ pvs: [owner] }), rules);
  t.same(f[0]?.action, { type: 'remove-dir', server: '127.0.0.1', share: TALOS, path: `apps/pvc-${uid(3)}` });
  t.end();
});

t.test('case 11: archives prune with a flat class next to <ns>/<pvc> never takes the namespace folder', (t) => {
  const layout = (flat: string | undefined) =>
    nfsFacts({
      classes: [nfsClass('nested', TALOS, NSPVC, 'archive'), nfsClass('flat', TALOS, flat, 'archive')],
      archives: [
        ['127.0.0.1', `${TALOS}/archived-media`, 400 * 24 * HOUR],
        ['127.0.0.1', `${TALOS}/archived-media/config-20261201T000000Z`, 0],
        ['127.0.0.1', `${TALOS}/archived-pvc-${uid(20)}`, 400 * 24 * HOUR],
      ],
    });
  // Without subDir the flat class archives only archived-pvc-<uid>: archived-media is nobody's.
  const plain = new Map(archiveVerdicts(layout(undefined), [owner]).map((x) => [x.archive.path, x]));
  t.notOk(plain.has('archived-media'), 'archived-media (a namespace folder) is no archive');
  t.equal(plain.get('archived-media/config-20261201T000000Z')?.kept, undefined, "the nested class's own archive");
  t.same(plain.get('archived-media/config-20261201T000000Z')?.classes, ['nested']);
  t.match(
    plain.get(`archived-pvc-${uid(20)}`)?.kept,
    /holds archives of class nested/,
    'pvc-<uid> is also a namespace name the nested class could have archived: kept',
  );
  // A flat ${pvc.metadata.name} class could have archived "media": both layouts claim the tree.
  const named = new Map(archiveVerdicts(layout('${pvc.metadata.name}'), [owner]).map((x) => [x.archive.path, x]));
  t.match(named.get('archived-media')?.kept, /holds archives of class nested/);
  t.match(named.get('archived-media/config-20261201T000000Z')?.kept, /inside an archive of class flat/);
  const alone = archiveVerdicts(
    nfsFacts({
      classes: [nfsClass('nested', TALOS, NSPVC, 'archive')],
      archives: [['127.0.0.1', `${TALOS}/archived-apps/old`, 0]],
    }),
    [owner],
  );
  t.equal(alone[0]?.kept, undefined, 'one class alone: its archive may go');
  t.end();
});

t.test('case 12: a static PV naming the parent share protects its directory', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('inner', TALOS, NSPV, 'delete')],
    dirs: [['127.0.0.1', `${TALOS}/media/pvc-${uid(4)}`, OLD]],
    archives: [['127.0.0.1', `${TALOS}/archived-media/pvc-${uid(5)}`, OLD]],
  });
  t.same(removed(nfsFindings(facts, kube({ pvs: [owner] }), rules)), [`media/pvc-${uid(4)}`], 'without the PV');
  for (const pv of [
    staticNfsPv('parent', '127.0.0.1', SHARE, `talos/media/pvc-${uid(4)}`),
    staticNfsPv('slashes', '127.0.0.1', `/${SHARE}//`, `/talos/./media/pvc-${uid(4)}/`),
    staticNfsPv('localhost', 'localhost', TALOS, `media/pvc-${uid(4)}`),
    staticNfsPv('upper', 'LOCALHOST', TALOS, `media`),
    inTreeNfsPv('in-tree', 'localhost', `${TALOS}/media/pvc-${uid(4)}`),
    staticNfsPv('unresolved', 'nas-that-does-not-resolve', TALOS, `media/pvc-${uid(4)}`),
  ])
    t.same(removed(nfsFindings(facts, kube({ pvs: [owner, pv] }), rules)), [], `PV ${pv.metadata?.name}`);
  const archivePv = staticNfsPv('recover', 'localhost', SHARE, `talos/archived-media/pvc-${uid(5)}`);
  t.match(archiveVerdicts(facts, [owner, archivePv])[0]?.kept, /PV recover points there/, 'archives too');
  t.equal(archiveVerdicts(facts, [owner])[0]?.kept, undefined);
  t.same(
    removed(nfsFindings(facts, kube({ pvs: [owner, staticNfsPv('nas', 'nas', TALOS, `media/pvc-${uid(4)}`)] }), rules)),
    [`media/pvc-${uid(4)}`],
    'a PV on another server does not count',
  );
  t.end();
});

t.test('case 13: a view without PVs (another or a rebuilt cluster) frees nothing', (t) => {
  const disks = [
    { disk: `vm-9999-pvc-${uid(6)}`, age: OLD },
    { disk: `vm-9999-pvc-${uid(7)}`, age: OLD },
  ];
  const foreign = proxmoxFindings(clusterFacts(disks), kube(), rules);
  t.same(removed(foreign), [], 'no disk freed');
  t.match(foreign[0]?.kept, /no PersistentVolume of csi.proxmox.sinextra.dev in region homelab/);
  const own = proxmoxFindings(
    clusterFacts(disks),
    kube({ pvs: [proxmoxPv('retain', `vm-9999-pvc-${uid(7)}`)] }),
    rules,
  );
  t.same(removed(own), [`local-lvm:vm-9999-pvc-${uid(6)}`], "the owner's view: the disk without a PV");
  const nfs = nfsFacts({
    classes: [nfsClass('flat', TALOS, undefined, 'delete')],
    dirs: [['127.0.0.1', `${TALOS}/pvc-${uid(8)}`, OLD]],
  });
  const f = nfsFindings(nfs, kube(), rules);
  t.same(removed(f), [], 'no directory removed');
  t.match(f[0]?.kept, /this cluster has no NFS PV on 127.0.0.1/);
  t.end();
});

t.test('case 13: a driver disk on a VM without a PV in this view refuses every disk of the region', (t) => {
  const busy = `vm-9999-pvc-${uid(9)}`;
  const scan = [
    {
      vm: { type: 'qemu' as const, vmid: 111, name: 'other-worker', node: 'hyper1' },
      entries: [{ key: 'scsi1', value: `local-lvm:${busy},wwn=0x5056432d49443031` }],
    },
  ];
  const f = proxmoxFindings(
    clusterFacts(
      [
        { disk: `vm-9999-pvc-${uid(10)}`, age: OLD },
        { disk: busy, age: OLD },
      ],
      scan,
    ),
    kube({ pvs: [proxmoxPv('mine', `vm-9999-pvc-${uid(11)}`)] }),
    rules,
  );
  t.same(removed(f), []);
  t.match(
    f.find((x) => x.what.includes(uid(10)))?.kept,
    /is on scsi1 of VM other-worker \(111\) but no PersistentVolume of this cluster names it/,
  );
  t.end();
});

t.test('case 13: what predates the cluster (or an unknown cluster age) is not its leftover', (t) => {
  const disks = [{ disk: `vm-9999-pvc-${uid(12)}`, age: 60 * 24 * HOUR }];
  const pvs = [proxmoxPv('mine', `vm-9999-pvc-${uid(13)}`)];
  t.match(proxmoxFindings(clusterFacts(disks), kube({ pvs }), rules)[0]?.kept, /older than this cluster/);
  const unknown = kube({ pvs });
  delete unknown.birth;
  t.match(proxmoxFindings(clusterFacts(disks), unknown, rules)[0]?.kept, /age is unknown/);
  const nfs = nfsFacts({
    classes: [nfsClass('flat', TALOS, undefined, 'delete')],
    dirs: [['127.0.0.1', `${TALOS}/pvc-${uid(14)}`, 60 * 24 * HOUR]],
  });
  t.match(nfsFindings(nfs, kube({ pvs: [owner] }), rules)[0]?.kept, /older than this cluster/);
  t.ok(NOW > 0);
  t.end();
});

t.test('an NFS PV whose directory cannot be read keeps every directory', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('flat', TALOS, undefined, 'delete')],
    dirs: [['127.0.0.1', `${TALOS}/pvc-${uid(15)}`, OLD]],
  });
  const odd = { metadata: { name: 'odd' }, spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle: '' } } };
  const f = nfsFindings(facts, kube({ pvs: [owner, odd] }), rules);
  t.same(removed(f), []);
  t.match(f[0]?.kept, /PV odd has an NFS directory that cannot be read/);
  t.end();
});

// Found by the property-based search (day2-property.test.ts): an archive of a share the view
// has no PV on was prunable, so another cluster's kubeconfig (whose recovery PVs it cannot see)
// pruned archives a PV of the owner cluster reads.
t.test('property counterexample: archives prune from a view without PVs on the server prunes nothing', (t) => {
  const facts = nfsFacts({
    classes: [nfsClass('flat', '/v', undefined, 'delete')],
    archives: [['127.0.0.1', `/v/archived-pvc-${uid(1)}`, 300e3]],
  });
  t.match(archiveVerdicts(facts, [])[0]?.kept, /this cluster has no NFS PV on 127.0.0.1/);
  t.equal(archiveVerdicts(facts, [dynamicNfsPv('pvc-x', 'localhost', '/v', 'pvc-x')])[0]?.kept, undefined);
  t.end();
});
