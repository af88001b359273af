// Snapshots in the chart: a csi-snapshotter next to each driver that runs one, the RBAC it and
// the provisioner need for VolumeSnapshots (external-snapshotter's and external-provisioner's
// deploy RBAC, without group snapshots), and the optional VolumeSnapshotClasses.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse } from 'yaml';
import { present } from '../helpers/present.js';
import {
  CHART,
  SEED_VALUES,
  container,
  flag,
  mountAt,
  podSpec,
  render,
  renderError,
  rules,
  type K8sObject,
  type Rendered,
} from './helm.js';
import { PROXMOX_DRIVER_NAME } from '../../src/proxmox/contract.js';
import { NFS_DRIVER_NAME } from '../../src/nfs/contract.js';

const SNAPSHOTTER_ROLE = 'pve-pve-nfs-csi-external-snapshotter';
const PROVISIONER_ROLE = 'pve-pve-nfs-csi-external-provisioner';
const values = parse(readFileSync(`${CHART}/values.yaml`, 'utf8')) as {
  sidecars: { snapshotter: { image: { repository: string; tag: string } } };
};
const pinned = `${values.sidecars.snapshotter.image.repository}:${values.sidecars.snapshotter.image.tag}`;

const controller = (r: Rendered) => podSpec(r.one('Deployment'));
const snapshotters = (r: Rendered) =>
  controller(r)
    .containers.filter((c) => c.name.endsWith('-snapshotter'))
    .map((c) => c.name)
    .sort();
const snapshotRules = (o: K8sObject | undefined) =>
  o ? rules(o).filter((r) => r.apiGroups.includes('snapshot.storage.k8s.io')) : [];
const classes = (r: Rendered) => r.all('VolumeSnapshotClass');
const off = ['proxmox.snapshots.enabled=false', 'nfs.snapshots.enabled=false'];
const on = ['proxmox.snapshots.enabled=true', 'nfs.snapshots.enabled=true'];
/** What `helm install` sees on a cluster where the VolumeSnapshot CRDs are installed. */
const withCrds = { apiVersions: ['snapshot.storage.k8s.io/v1/VolumeSnapshotContent'] };
const createBoth = [
  'proxmox.snapshots.volumeSnapshotClass.create=true',
  'nfs.snapshots.volumeSnapshotClass.create=true',
];

t.test(
  'defaults (auto): no csi-snapshotter and no snapshot RBAC where the cluster has no VolumeSnapshot API',
  async (t) => {
    // The seed's cluster runs no snapshot-controller: a sidecar there would only log a failed list
    // of VolumeSnapshotContents every few seconds for as long as the pod runs.
    for (const r of [render(), render({ valuesFiles: [SEED_VALUES] })]) {
      t.strictSame(snapshotters(r), []);
      t.equal(r.find('ClusterRole', SNAPSHOTTER_ROLE), undefined);
      t.strictSame(snapshotRules(r.find('ClusterRole', PROVISIONER_ROLE)), []);
    }
    t.strictSame(snapshotters(render({ set: on })), ['nfs-snapshotter', 'proxmox-snapshotter'], 'true runs it anyway');
    t.strictSame(
      snapshotters(render({ set: ['proxmox.snapshots.volumeSnapshotClass.create=true'] })),
      ['proxmox-snapshotter'],
      "auto with the driver's own VolumeSnapshotClass (which needs the CRDs) runs that driver's",
    );
    t.strictSame(snapshotters(render({ ...withCrds, set: off })), [], 'false keeps it off with the CRDs');
  },
);

t.test(
  'auto on a cluster with the CRDs: one csi-snapshotter per driver, on its socket, at the pinned version',
  async (t) => {
    const r = render(withCrds);
    const spec = controller(r);
    t.strictSame(snapshotters(r), ['nfs-snapshotter', 'proxmox-snapshotter']);
    for (const [name, socket, timeout] of [
      ['proxmox-snapshotter', 'socket-proxmox', '3m'],
      ['nfs-snapshotter', 'socket-nfs', '5m'],
    ] as const) {
      const c = container(spec, name);
      t.equal(c.image, pinned, `${name} image is sidecars.snapshotter's`);
      t.equal(mountAt(c, '/csi')?.name, socket, `${name} reaches its own driver`);
      t.equal(flag(c.args, '--csi-address'), '/csi/csi.sock');
      t.equal(flag(c.args, '--timeout'), timeout, `${name} waits as long as the driver's other sidecars`);
      t.ok(c.args?.includes('--leader-election'), `${name} elects a leader`);
      t.equal(
        flag(c.args, '--feature-gates'),
        'CSIVolumeGroupSnapshot=false',
        `${name}: no group snapshots, so no VolumeGroupSnapshot CRD lookups or RBAC`,
      );
    }
    t.equal(classes(r).length, 0, 'no VolumeSnapshotClass unless asked for');
    t.equal(classes(render({ valuesFiles: [SEED_VALUES] })).length, 0, 'the seed has none either');
  },
);

t.test('RBAC: what external-snapshotter and external-provisioner ask for, no group snapshots', async (t) => {
  const r = render(withCrds);
  t.strictSame(rules(r.get('ClusterRole', SNAPSHOTTER_ROLE)), [
    { apiGroups: [''], resources: ['events'], verbs: ['list', 'watch', 'create', 'update', 'patch'] },
    { apiGroups: ['snapshot.storage.k8s.io'], resources: ['volumesnapshotclasses'], verbs: ['get', 'list', 'watch'] },
    {
      apiGroups: ['snapshot.storage.k8s.io'],
      resources: ['volumesnapshotcontents'],
      verbs: ['get', 'list', 'watch', 'update', 'patch'],
    },
    {
      apiGroups: ['snapshot.storage.k8s.io'],
      resources: ['volumesnapshotcontents/status'],
      verbs: ['update', 'patch'],
    },
  ]);
  const binding = r.get('ClusterRoleBinding', SNAPSHOTTER_ROLE);
  t.same(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: SNAPSHOTTER_ROLE });
  t.same(binding.subjects, [
    { kind: 'ServiceAccount', name: controller(r).serviceAccountName, namespace: 'csi-storage' },
  ]);
  t.strictSame(snapshotRules(r.get('ClusterRole', PROVISIONER_ROLE)), [
    {
      apiGroups: ['snapshot.storage.k8s.io'],
      resources: ['volumesnapshots'],
      verbs: ['get', 'list', 'watch', 'update'],
    },
    { apiGroups: ['snapshot.storage.k8s.io'], resources: ['volumesnapshotcontents'], verbs: ['get', 'list'] },
  ]);
  t.notOk(JSON.stringify(r.objects).includes('groupsnapshot'), 'nothing for group snapshots');
});

t.test('snapshots off for both drivers: no sidecar and no snapshot RBAC', async (t) => {
  const r = render({ set: off });
  t.strictSame(snapshotters(r), []);
  t.equal(r.find('ClusterRole', SNAPSHOTTER_ROLE), undefined);
  t.equal(r.find('ClusterRoleBinding', SNAPSHOTTER_ROLE), undefined);
  t.strictSame(snapshotRules(r.find('ClusterRole', PROVISIONER_ROLE)), []);
});

t.test('snapshots for one driver only: its sidecar, and the RBAC for it', async (t) => {
  const onlyNfs = render({ ...withCrds, set: ['proxmox.snapshots.enabled=false'] });
  t.strictSame(snapshotters(onlyNfs), ['nfs-snapshotter']);
  t.ok(onlyNfs.find('ClusterRole', SNAPSHOTTER_ROLE));
  // The driver that is off takes its snapshot settings with it.
  const proxmoxOff = render({
    set: [
      'proxmox.enabled=false',
      'nfs.snapshots.enabled=false',
      'nfs.storageClasses[0].name=n',
      'nfs.storageClasses[0].parameters.server=nas',
      'nfs.storageClasses[0].parameters.share=/s',
      'proxmox.snapshots.volumeSnapshotClass.create=true',
    ],
  });
  t.strictSame(snapshotters(proxmoxOff), []);
  t.equal(proxmoxOff.find('ClusterRole', SNAPSHOTTER_ROLE), undefined);
  t.equal(classes(proxmoxOff).length, 0, 'no class for a driver that is not served');
});

t.test('VolumeSnapshotClasses on request: one per driver, deletionPolicy and default as set', async (t) => {
  const r = render({ set: createBoth });
  const byDriver = new Map(classes(r).map((c) => [c.driver as string, c]));
  t.strictSame([...byDriver.keys()].sort(), [NFS_DRIVER_NAME, PROXMOX_DRIVER_NAME].sort());
  const px = present(byDriver.get(PROXMOX_DRIVER_NAME), 'the Proxmox class');
  t.equal(px.apiVersion, 'snapshot.storage.k8s.io/v1');
  t.equal(px.metadata.name, 'proxmox-snapshot');
  t.equal(px.deletionPolicy, 'Delete');
  t.equal(px.metadata.annotations?.['snapshot.storage.kubernetes.io/is-default-class'], 'true');
  t.equal(px.parameters, undefined, 'no parameters unless given');
  t.equal(present(byDriver.get(NFS_DRIVER_NAME), 'the NFS class').metadata.name, 'nfs-snapshot');

  const custom = render({
    set: [
      ...createBoth,
      'nfs.snapshots.volumeSnapshotClass.name=nas-keep',
      'nfs.snapshots.volumeSnapshotClass.deletionPolicy=Retain',
      'nfs.snapshots.volumeSnapshotClass.default=false',
      'nfs.snapshots.volumeSnapshotClass.labels.backup\\.example/tier=nas',
      'proxmox.snapshots.volumeSnapshotClass.parameters.retries=3',
    ],
  });
  const nfs = custom.get('VolumeSnapshotClass', 'nas-keep');
  t.equal(nfs.deletionPolicy, 'Retain');
  t.equal(nfs.metadata.annotations, undefined, 'not a default class');
  t.equal(nfs.metadata.labels?.['backup.example/tier'], 'nas');
  t.same(custom.get('VolumeSnapshotClass', 'proxmox-snapshot').parameters, { retries: '3' });
});

t.test('refused: a class without its sidecar, an unknown deletionPolicy', async (t) => {
  t.match(
    renderError({ set: ['proxmox.snapshots.enabled=false', 'proxmox.snapshots.volumeSnapshotClass.create=true'] }),
    /proxmox\.snapshots\.volumeSnapshotClass\.create needs proxmox\.snapshots\.enabled/,
  );
  t.match(
    renderError({ set: ['nfs.snapshots.volumeSnapshotClass.deletionPolicy=Keep'] }),
    /deletionPolicy/,
    'the schema names the field',
  );
});
