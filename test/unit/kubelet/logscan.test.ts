// The kubelet tier's log scan (test/kubelet/logscan.ts): what counts as the same error line, what
// counts as an error at all, and the median of the tier's summary.
import t from 'tap';
import {
  deletedPodStatusGet,
  errorShape,
  imageFsOnTmpfs,
  forbiddenLines,
  isErrorLine,
  median,
  repeatedErrors,
} from '../../kubelet/logscan.js';

t.test('klog lines that differ only in time, pid, numbers and ids have one shape', async (t) => {
  const a =
    'E1202 06:01:02.345678    4711 csi_attacher.go:410] kubernetes.io/csi: attacher.MountDevice failed pvc-0f8b3c1e-1111-2222-3333-444455556666 after 12s';
  const b =
    'E1202 06:09:59.000001    4711 csi_attacher.go:410] kubernetes.io/csi: attacher.MountDevice failed pvc-9a8b3c1e-aaaa-bbbb-cccc-ddddeeeeffff after 3s';
  t.equal(errorShape(a), errorShape(b));
  t.notOk(errorShape(a).includes('4711'), 'the header is gone');
});

t.test('error lines: klog E/F, JSON and logfmt levels, ERROR; not info lines that mention errors', async (t) => {
  t.ok(isErrorLine('E1202 06:01:02.345678 1 x.go:1] boom'));
  t.ok(isErrorLine('F1202 06:01:02.345678 1 x.go:1] boom'));
  t.ok(isErrorLine('{"level":"error","msg":"x"}'));
  t.ok(isErrorLine('{"level":50,"msg":"x"}'));
  t.ok(isErrorLine('time=1 level=error msg=x'));
  t.notOk(isErrorLine('I1202 06:01:02.345678 1 x.go:1] retrying after error'));
  t.notOk(isErrorLine('{"level":"info","msg":"no error"}'));
});

t.test('a shape repeated to the threshold is reported with its count; fewer is not', async (t) => {
  const line = (i: number) => `E1202 06:01:${String(i).padStart(2, '0')}.000000 1 x.go:1] sync failed for volume ${i}`;
  const lines = [...Array.from({ length: 20 }, (_, i) => line(i)), 'E1202 06:02:00.000000 1 y.go:2] once'];
  const found = repeatedErrors(lines, 20);
  t.equal(found.length, 1);
  t.equal(found[0]?.count, 20);
  t.same(repeatedErrors(lines, 21), []);
});

t.test('a loop is one failure repeating for one object, not one failure each for many', async (t) => {
  const pv = (n: number) => `pvc-0f8b3c1e-1111-2222-3333-${n.toString(16).padStart(12, '0')}`;
  const conflict = (n: number) =>
    `E1202 18:20:${String(n % 60).padStart(2, '0')}.422695   25889 pv_protection_controller.go:126] "Unhandled Error" err="PV ${pv(n)} failed with : Operation cannot be fulfilled on persistentvolumes \\"${pv(n)}\\": the object has been modified"`;
  t.same(
    repeatedErrors(
      Array.from({ length: 22 }, (_, i) => conflict(i)),
      20,
    ),
    [],
    'one conflict for each of 22 PVs',
  );
  const same = repeatedErrors(
    Array.from({ length: 20 }, () => conflict(7)),
    20,
  );
  t.equal(same.length, 1, 'twenty for one PV');
  t.equal(same[0]?.count, 20);
  const crd =
    'E1202 06:01:02.345678 1 reflector.go:1] "Failed to watch" err="the server could not find the requested resource"';
  t.equal(
    repeatedErrors(
      Array.from({ length: 20 }, () => crd),
      20,
    )[0]?.count,
    20,
    'and a loop about nothing in particular',
  );
});

t.test('kubelet on an image filesystem that is a tmpfs: its three lines, nothing else', async (t) => {
  const lines = [
    'E1202 18:18:15.233753     408 cri_stats_provider.go:533] "Failed to get the info of the filesystem with mountpoint" err="cannot find filesystem info for device \\"/var/lib/containerd\\"" mountpoint="/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"',
    'E1202 18:18:15.237284     408 eviction_manager.go:272] "Eviction manager: failed to get HasDedicatedImageFs" err="get filesystem info: Failed to get the info of the filesystem with mountpoint: cannot find filesystem info for device \\"/var/lib/containerd\\""',
    'E1202 18:18:15.240423     408 eviction_manager.go:220] "Eviction manager: failed to synchronize" err="eviction manager: failed to get HasDedicatedImageFs: get filesystem info: Failed to get the info of the filesystem with mountpoint: cannot find filesystem info for device \\"/var/lib/containerd\\""',
  ];
  for (const l of lines) t.ok(imageFsOnTmpfs(l), l.slice(0, 60));
  t.notOk(imageFsOnTmpfs(lines[0]?.replaceAll('/var/lib/containerd', '/var/lib/kubelet') ?? ''), 'another directory');
  t.notOk(imageFsOnTmpfs(lines[1]?.replace('eviction_manager.go', 'csi_attacher.go') ?? ''), 'another component');
});

t.test('forbidden in any case', async (t) => {
  t.same(forbiddenLines(['ok', 'User "system:node:x" cannot get resource: Forbidden', 'fine']), [
    'User "system:node:x" cannot get resource: Forbidden',
  ]);
});

t.test(
  "kubelet's status GET of a deleted pod, refused by the Node authorizer: named; any other refusal is not",
  async (t) => {
    const line = (err: string, msg = 'Failed to get status for pod') =>
      `E1202 06:01:02.345678    812 status_manager.go:1257] "${msg}" err="${err}" podUID="0f8b3c1e-1111-2222-3333-444455556666" pod="apps/rwop-a"`;
    const gone =
      'pods \\"rwop-a\\" is forbidden: User \\"system:node:talos-worker-1\\" cannot get resource \\"pods\\" in API group \\"\\" in the namespace \\"apps\\": no relationship found between node \'talos-worker-1\' and this object';
    t.equal(deletedPodStatusGet(line(gone)), 'apps/rwop-a');
    t.equal(deletedPodStatusGet(line(gone, 'Failed to update status for pod')), undefined, 'a refused patch is not it');
    t.equal(
      deletedPodStatusGet(line(gone.replace('cannot get resource \\"pods\\"', 'cannot get resource \\"secrets\\"'))),
      undefined,
      'nor a refused read of anything but the pod',
    );
    t.equal(
      deletedPodStatusGet(line(gone.replace(/: no relationship.*/, ''))),
      undefined,
      'nor a refusal by RBAC with no graph reason',
    );
    t.equal(deletedPodStatusGet('I1202 06:01:02.345678 1 x.go:1] all fine'), undefined);
  },
);

t.test('median: odd, even, unsorted; nothing is an error', async (t) => {
  t.equal(median([3, 1, 2]), 2);
  t.equal(median([4, 1, 3, 2]), 2.5);
  t.throws(() => median([]));
});
