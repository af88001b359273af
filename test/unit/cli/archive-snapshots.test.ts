// What `archives list` and `archives prune` say about NFS snapshots: listed apart from the
// archives with their source claim, state, age and size; prune names them as left alone.
import t from 'tap';
import { formatSnapshots, snapshotRows } from '../../../src/cli/archive-snapshots.js';
import type { NfsSnapshotDir, NfsUpstreamSnapshot } from '../../../src/cli/report/facts.js';

const NOW = Date.UTC(2026, 11, 2, 12);
const HOUR = 3_600_000;
const place = { server: 'nas', share: '/v/k8s' };
const snapshots: NfsSnapshotDir[] = [
  {
    ...place,
    name: 'snapshot-1',
    dir: '.snapshots/snapshot-1',
    at: '/v/k8s/.snapshots/snapshot-1',
    complete: {
      ...place,
      name: 'snapshot-1',
      sourceVolumeId: 'nas#v/k8s#media/config##',
      createdMs: NOW - 50 * HOUR,
      sizeBytes: 3 * 2 ** 20,
      dataPath: '.snapshots/snapshot-1/tree',
    },
  },
  {
    ...place,
    name: 'snapshot-2',
    dir: '.snapshots/snapshot-2',
    at: '/v/k8s/.snapshots/snapshot-2',
    ours: true,
    changedAt: NOW - 2 * HOUR,
    sizeBytes: 1024,
  },
];

t.test('list: one row per snapshot, complete and partial apart from the archives', async (t) => {
  const rows = snapshotRows({ snapshots });
  t.match(rows, [
    { name: 'snapshot-1', source: 'media/config', state: 'complete', sizeBytes: 3 * 2 ** 20, at: NOW - 50 * HOUR },
    { name: 'snapshot-2', state: 'partial', sizeBytes: 1024, at: NOW - 2 * HOUR },
  ]);
  t.notOk(rows[1]?.source, 'a partial copy records no source');
  const out = formatSnapshots(rows, NOW, 'list');
  t.match(out, /SHARE\s+SNAPSHOT\s+OF\s+STATE\s+AGE\s+SIZE/);
  t.match(out, /nas:\/v\/k8s\s+snapshot-1\s+media\/config\s+complete\s+2d/);
  t.match(out, /snapshot-2\s+\?\s+partial/);
  t.match(out, /2 snapshot\(s\), .*; 1 partial .*report --fix/);
  t.equal(formatSnapshots([], NOW, 'list'), '', 'nothing when there are none');
});

t.test('prune: snapshots are never among what it removes', async (t) => {
  for (const mode of ['dry-run', 'pruned'] as const) {
    const out = formatSnapshots(snapshotRows({ snapshots }), NOW, mode);
    t.match(
      out,
      /^2 snapshot\(s\) left alone: prune never removes snapshots \(DeleteSnapshot does; report --fix removes the 1 partial/,
    );
    t.notMatch(out, /would remove|removed/);
  }
});

t.test('csi-driver-nfs snapshot archives are rows of their own, never pruned', async (t) => {
  const upstreamSnapshots: NfsUpstreamSnapshot[] = [
    {
      ...place,
      name: 'snapshot-9',
      src: 'pvc-9',
      at: '/v/k8s/snapshot-9',
      archives: [{ name: 'pvc-9.tar.gz', sizeBytes: 2048, mtimeMs: NOW - 5 * HOUR }],
    },
  ];
  const rows = snapshotRows({ snapshots, upstreamSnapshots });
  t.match(rows[2], {
    name: 'snapshot-9',
    path: 'snapshot-9/pvc-9.tar.gz',
    source: 'pvc-9',
    state: 'csi-driver-nfs',
    at: NOW - 5 * HOUR,
    sizeBytes: 2048,
  });
  t.match(formatSnapshots(rows, NOW, 'list'), /snapshot-9\s+pvc-9\s+csi-driver-nfs\s+5h/);
  t.match(formatSnapshots(rows, NOW, 'pruned'), /^3 snapshot\(s\) left alone/);
});
