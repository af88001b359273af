// The soft-quota measurement of NFS volumes (src/nfs/node/usage.ts): du of the volume's
// directory (statfs of an NFS mount is the whole share), bounded and off the stats call's path.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { createVolumeUsage, measureDir, pvOfPath, type Walked } from '../../../../src/nfs/node/usage.js';

const log = pino({ level: 'silent' });

function tree(t: { teardown(f: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nfs-usage-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.mkdirSync(path.join(dir, 'a/b'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'one'), Buffer.alloc(64 * 1024, 1));
  fs.writeFileSync(path.join(dir, 'a/b/two'), Buffer.alloc(128 * 1024, 2));
  fs.linkSync(path.join(dir, 'a/b/two'), path.join(dir, 'a/hardlink'));
  fs.symlinkSync('/etc', path.join(dir, 'a/elsewhere'));
  return dir;
}

t.test('measureDir: allocated bytes under the directory, hard links once, symlinks not followed', async (t) => {
  const dir = tree(t);
  const w = await measureDir(dir, 1000);
  const blocks = (p: string) => fs.lstatSync(path.join(dir, p)).blocks * 512;
  const want = ['one', 'a', 'a/b', 'a/b/two', 'a/elsewhere'].reduce((n, p) => n + blocks(p), 0);
  t.same(w, { bytes: want, entries: 6, complete: true });
  t.ok(w.bytes >= 192 * 1024, `at least the data written (${w.bytes})`);
});

t.test('measureDir: stops at its entry limit and says so', async (t) => {
  const w = await measureDir(tree(t), 3);
  t.equal(w.entries, 3);
  t.equal(w.complete, false);
});

t.test('pvOfPath: the PV of a kubelet publish path', async (t) => {
  t.equal(pvOfPath('/var/lib/kubelet/pods/0f1e/volumes/kubernetes.io~csi/pvc-1234/mount'), 'pvc-1234');
  t.equal(pvOfPath('/somewhere/else'), '');
});

t.test('observe: measured in the background, at most once per interval; dropped when no longer asked', async (t) => {
  let clock = 1_000_000;
  const walks: string[] = [];
  let result: Walked = { bytes: 100, entries: 1, complete: true };
  const u = createVolumeUsage({
    log,
    now: () => clock,
    minIntervalMs: 60_000,
    staleMs: 300_000,
    measure: async (dir) => {
      walks.push(dir);
      return result;
    },
  });
  const p = '/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-a/mount';
  t.same(u.snapshot(), [], 'nothing before kubelet asks');
  u.observe('vol-a', p);
  u.observe('vol-a', p);
  await u.idle();
  t.same(walks, [p], 'two stats calls, one walk');
  const labels = { persistentvolume: 'pvc-a', volume_id: 'vol-a' };
  t.same(u.snapshot(), [
    { name: 'pve_csi_nfs_volume_used_bytes', labels, value: 100 },
    { name: 'pve_csi_nfs_volume_usage_complete', labels, value: 1 },
    { name: 'pve_csi_nfs_volume_usage_timestamp_seconds', labels, value: 1000 },
  ]);
  clock += 30_000;
  u.observe('vol-a', p);
  await u.idle();
  t.equal(walks.length, 1, 'within the interval: no new walk');
  clock += 31_000;
  result = { bytes: 500, entries: 9, complete: false };
  u.observe('vol-a', p);
  await u.idle();
  t.equal(walks.length, 2, 'after the interval: measured again');
  t.match(u.snapshot(), [{ value: 500 }, { value: 0 }, { value: 1061 }]);
  clock += 301_000;
  t.same(u.snapshot(), [], 'unpublished (no stats call for staleMs): gone');
});

t.test('observe: a walk that fails leaves the last value and logs; one walk at a time', async (t) => {
  let running = 0;
  let most = 0;
  const u = createVolumeUsage({
    log,
    measure: async (dir) => {
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setTimeout(r, 5));
      running--;
      if (dir.endsWith('bad')) throw new Error('EIO');
      return { bytes: 1, entries: 1, complete: true };
    },
  });
  for (const v of ['x', 'y', 'bad']) u.observe(v, `/k/${v}`);
  await u.idle();
  t.equal(most, 1, 'serial walks');
  t.same(
    u
      .snapshot()
      .filter((s) => s.name === 'pve_csi_nfs_volume_used_bytes')
      .map((s) => s.labels.volume_id),
    ['x', 'y'],
  );
});
