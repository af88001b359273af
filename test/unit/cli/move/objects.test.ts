// The pure parts of `move`: names, handles, the replacement PV and claim, the record, privileges.
import t from 'tap';
import { buildClaim, buildReplacementPv, replacementPvName, targetHandle } from '../../../../src/cli/move/objects.js';
import { missingMovePrivileges } from '../../../../src/cli/privileges.js';
import { type MoveRecord, RECORD_KEY, readRecord, saveClaim } from '../../../../src/cli/move/record.js';
import type { PersistentVolume, PersistentVolumeClaim } from '../../../../src/cli/move/kube-port.js';

const oldPv: PersistentVolume = {
  metadata: {
    name: 'pvc-0b1c',
    uid: 'u-pv',
    labels: { team: 'media' },
    annotations: {
      'pv.kubernetes.io/provisioned-by': 'csi.proxmox.sinextra.dev',
      'pv.kubernetes.io/bound-by-controller': 'yes',
    },
  },
  spec: {
    capacity: { storage: '10Gi' },
    accessModes: ['ReadWriteOnce'],
    storageClassName: 'proxmox-local',
    persistentVolumeReclaimPolicy: 'Retain',
    mountOptions: ['noatime'],
    claimRef: { namespace: 'media', name: 'config', uid: 'old-claim' },
    csi: {
      driver: 'csi.proxmox.sinextra.dev',
      volumeHandle: 'homelab/hyper1/local-lvm/vm-9999-pvc-0b1c',
      fsType: 'ext4',
      volumeAttributes: { storage: 'local-lvm' },
    },
    nodeAffinity: {
      required: {
        nodeSelectorTerms: [
          { matchExpressions: [{ key: 'topology.kubernetes.io/zone', operator: 'In', values: ['hyper1'] }] },
        ],
      },
    },
  },
};
const claim: PersistentVolumeClaim = {
  metadata: {
    name: 'config',
    namespace: 'media',
    uid: 'old-claim',
    labels: { app: 'sonarr' },
    ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'sonarr', uid: 'ss-uid' }],
    annotations: {
      keep: 'me',
      'pv.kubernetes.io/bind-completed': 'yes',
      'pv.kubernetes.io/bound-by-controller': 'yes',
      'volume.kubernetes.io/selected-node': 'talos-worker-1',
    },
  },
  spec: {
    accessModes: ['ReadWriteOnce'],
    resources: { requests: { storage: '10Gi' } },
    storageClassName: 'proxmox-local',
    volumeName: 'pvc-0b1c',
    dataSource: { kind: 'PersistentVolumeClaim', name: 'x' },
  },
};

t.test('names and handles', (t) => {
  t.equal(replacementPvName('vm-9999-pvc-0b1c', 'hyper2'), 'pvc-0b1c-hyper2');
  t.equal(replacementPvName('vm-9999-pvc-0b1c', 'Hyper2'), 'pvc-0b1c-hyper2', 'lower-cased into a DNS name');
  t.equal(
    targetHandle('homelab/hyper1/local-lvm/vm-9999-pvc-0b1c', 'hyper2', 'vm-9999-disk-0'),
    'homelab/hyper2/local-lvm/vm-9999-disk-0',
  );
  t.throws(() => targetHandle('nonsense', 'hyper2', 'd'));
  t.end();
});

t.test('the saved claim drops what controllers set; the recreated one is pre-bound', (t) => {
  const saved = saveClaim(claim);
  t.same(saved.annotations, { keep: 'me' });
  t.same(saved.labels, { app: 'sonarr' });
  t.notOk('volumeName' in saved.spec || 'dataSource' in saved.spec);
  const r: MoveRecord = {
    v: 1,
    claim: { namespace: 'media', name: 'config' },
    oldPv: 'pvc-0b1c',
    newPv: 'pvc-0b1c-hyper2',
    from: 'homelab/hyper1/local-lvm/vm-9999-pvc-0b1c',
    to: 'homelab/hyper2/local-lvm/vm-9999-pvc-0b1c',
    toZone: 'hyper2',
    reclaimPolicy: 'Delete',
    savedClaim: saved,
    step: 'pv-created',
    started: 'now',
  };
  const c = buildClaim(r);
  t.same(
    c.metadata,
    {
      name: 'config',
      namespace: 'media',
      labels: { app: 'sonarr' },
      annotations: { keep: 'me' },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'sonarr', uid: 'ss-uid' }],
    },
    'no uid, no resourceVersion; owner kept',
  );
  t.equal(c.spec.volumeName, 'pvc-0b1c-hyper2');
  const pv = buildReplacementPv(oldPv, r);
  t.equal(pv.metadata.name, 'pvc-0b1c-hyper2');
  t.equal(pv.spec.csi?.volumeHandle, r.to);
  t.equal(pv.spec.csi?.fsType, 'ext4');
  t.same(pv.spec.mountOptions, ['noatime'], 'the rest of the spec is kept');
  t.equal(pv.spec.persistentVolumeReclaimPolicy, 'Retain', 'Retain until the move is done');
  t.same(
    pv.spec.claimRef,
    { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace: 'media', name: 'config' },
    'pre-bound by name, no uid yet',
  );
  t.same(
    pv.spec.nodeAffinity?.required?.nodeSelectorTerms[0]?.matchExpressions?.map((e) => [e.key, e.values]),
    [
      ['topology.kubernetes.io/region', ['homelab']],
      ['topology.kubernetes.io/zone', ['hyper2']],
    ],
  );
  t.equal(pv.metadata.annotations?.['pve-nfs-csi.io/moved-from'], 'pvc-0b1c');
  t.notOk(pv.metadata.annotations?.['pv.kubernetes.io/bound-by-controller']);
  t.equal(readRecord(pv)?.step, 'pv-created', 'carries the record');
  t.end();
});

t.test('a record that is not ours is ignored', (t) => {
  const on = (v: string): PersistentVolume => ({ metadata: { name: 'x', annotations: { [RECORD_KEY]: v } }, spec: {} });
  t.equal(readRecord(on('not json')), undefined);
  t.equal(readRecord(on('{"v":2,"step":"planned"}')), undefined);
  t.equal(readRecord(on('{"v":1,"step":"teleported"}')), undefined);
  t.equal(readRecord(on('null')), undefined);
  t.equal(readRecord(on('{"v":1,"step":"bound"}'))?.step, 'bound');
  t.end();
});

t.test('privileges: propagated from /, /vms or /storage; missing ones named with their use', (t) => {
  const all = {
    'VM.Audit': 1,
    'VM.Allocate': 1,
    'VM.Config.Options': 1,
    'VM.Migrate': 1,
    'VM.Config.Disk': 1,
    'Datastore.Audit': 1,
    'Datastore.AllocateSpace': 1,
    'Datastore.Allocate': 1,
  };
  t.same(missingMovePrivileges({ '/': all }, 9999, 'local-lvm'), []);
  t.same(missingMovePrivileges({ '/vms/9999': all, '/storage': all }, 9999, 'local-lvm'), []);
  const csiRole = {
    'VM.Audit': 1,
    'VM.Config.Disk': 1,
    'Datastore.Allocate': 1,
    'Datastore.AllocateSpace': 1,
    'Datastore.Audit': 1,
  };
  t.same(missingMovePrivileges({ '/': csiRole }, 9999, 'local-lvm'), [
    'VM.Allocate on /vms/9999 (create and destroy the helper VM)',
    'VM.Config.Options on /vms/9999 (give the helper VM its name and description at creation)',
    'VM.Migrate on /vms/9999 (migrate the helper VM with the disk)',
  ]);
  t.same(
    missingMovePrivileges({ '/vms/101': all, '/': csiRole }, 9999, 'local-lvm').length,
    3,
    'another VM path does not count',
  );
  t.end();
});
