// The kubelet tier's log scan (test/kubelet/logscan.ts): what counts as the same error line, what
// counts as an error at all, and the median of the tier's summary.
import t from 'tap';
import {
  deletedPodStatusGet,
  errorShape,
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
