// docs/design.md#node-paths on the NFS node: node calls act only inside the kubelet directory; umount
// (and its -f / -l escalation) runs only on the NFS mount of this volume; data is never deleted.
// The host has no NFS client, so the mount table is the fake executor's and every command the
// node runs is recorded: the assertion is that no umount ever reached a path it must not touch.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { implemented } from '../../../helpers/implemented.js';
import { isCsiError } from '../../../../src/errors.js';
import type { CallContext, NodePublishVolumeRequest, VolumeCapability } from '../../../../src/csi/types.js';
import { FakeSystem, fail } from '../../os/fakes.js';
import { rejection } from '../../../helpers/rejection.js';
import { nfsNodeOn } from './fixture.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);
const cap: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
  accessType: 'mount',
};
const VOL = '127.0.0.1#volume1/k8s-volumes/talos#media/data#pvc-1#archive';
const SOURCE = '127.0.0.1:/volume1/k8s-volumes/talos/media/data';

function setup(t: { teardown(fn: () => void): void }) {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'nfs-node-safety-')));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const kubelet = path.join(root, 'kubelet');
  const outside = path.join(root, 'outside');
  fs.mkdirSync(path.join(kubelet, 'pods'), { recursive: true });
  fs.mkdirSync(outside);
  const sys = new FakeSystem();
  // Every umount attempt fails the way a dead server or a busy root does, so -f and -l would follow.
  sys.intercept((cmd, args) =>
    cmd === 'umount' && !args.includes('-l')
      ? Promise.reject(fail(cmd, args, 32, `umount: ${args.at(-1)}: target is busy.`))
      : undefined,
  );
  const node = implemented(nfsNodeOn(sys, kubelet, { mountTimeoutMs: 2000 }), ['nodeGetVolumeStats']);
  const umounts = () => sys.commands.filter((c) => c[0] === 'umount');
  const pub = (targetPath: string, extra: Partial<NodePublishVolumeRequest> = {}): NodePublishVolumeRequest => ({
    volumeId: VOL,
    publishContext: {},
    stagingTargetPath: '',
    targetPath,
    volumeCapability: cap,
    readonly: false,
    secrets: {},
    volumeContext: { server: '127.0.0.1', share: '/volume1/k8s-volumes/talos', subDir: 'media/data' },
    ...extra,
  });
  return { root, kubelet, outside, sys, node, umounts, pub };
}

t.test('target "/" is refused with INVALID_ARGUMENT and no umount runs', async (t) => {
  const { node, sys, kubelet, umounts } = setup(t);
  sys.addMount({ target: '/', source: '/dev/sda1', fstype: 'ext4' });
  for (const targetPath of ['/', '//', '/..', `${kubelet}/../../../../..`]) {
    const err = await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath }, ctx));
    t.equal(code(err), 'InvalidArgument', targetPath);
    t.match(err.message, kubelet, 'names the kubelet dir');
  }
  t.same(umounts(), [], 'no umount at all');
});

t.test('a made-up volume id over an unrelated mount: no umount, FAILED_PRECONDITION', async (t) => {
  const { node, sys, kubelet, umounts } = setup(t);
  const target = path.join(kubelet, 'pods', 'p1', 'volumes', 'kubernetes.io~csi', 'pv', 'mount');
  fs.mkdirSync(target, { recursive: true });
  sys.addMount({ target, source: 'tmpfs', fstype: 'tmpfs' });
  const err = await rejection(node.nodeUnpublishVolume({ volumeId: 'made-up', targetPath: target }, ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /tmpfs/);
  t.same(umounts(), [], 'not unmounted');
  t.ok(fs.existsSync(target), 'target kept');

  // Another NFS volume at the target: the handle names a different export, so it is not ours.
  const other = path.join(kubelet, 'pods', 'p2', 'mount');
  fs.mkdirSync(other, { recursive: true });
  sys.addMount({ target: other, source: '127.0.0.1:/volume1/k8s-volumes/talos/other/pvc', fstype: 'nfs4' });
  const err2 = await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath: other }, ctx));
  t.equal(code(err2), 'FailedPrecondition');
  t.match(err2.message, /other\/pvc/);
  t.same(umounts(), [], 'a different export is not force-unmounted');
});

t.test("this volume's mount is unmounted with the -f / -l escalation, a foreign layer below is kept", async (t) => {
  const { node, sys, kubelet, umounts } = setup(t);
  const target = path.join(kubelet, 'pods', 'p3', 'mount');
  fs.mkdirSync(target, { recursive: true });
  sys.addMount({ target, source: 'tmpfs', fstype: 'tmpfs' });
  sys.addMount({ target, source: SOURCE, fstype: 'nfs4' });
  const err = await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath: target }, ctx));
  t.same(
    umounts().map((c) => c.at(-2)),
    ['--no-canonicalize', '-f', '-l'],
    'our layer: plain, -f, -l',
  );
  t.equal(code(err), 'FailedPrecondition', 'the layer below is not ours');
  t.equal(sys.table.filter((m) => m.target === target).length, 1, 'the tmpfs layer is still mounted');
  t.ok(fs.existsSync(target));
});

t.test('a plain file with data or a non-empty dir at the target is never deleted', async (t) => {
  const { node, kubelet } = setup(t);
  const file = path.join(kubelet, 'pods', 'p4', 'mount');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, 'user data');
  t.equal(
    code(await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath: file }, ctx))),
    'FailedPrecondition',
  );
  t.equal(fs.readFileSync(file, 'utf8'), 'user data');
  const dir = path.join(kubelet, 'pods', 'p5', 'mount');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'f'), 'x');
  t.equal(
    code(await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath: dir }, ctx))),
    'FailedPrecondition',
  );
  t.ok(fs.existsSync(path.join(dir, 'f')));
  const empty = path.join(kubelet, 'pods', 'p6', 'mount');
  fs.mkdirSync(empty, { recursive: true });
  await node.nodeUnpublishVolume({ volumeId: VOL, targetPath: empty }, ctx);
  t.notOk(fs.existsSync(empty), 'an empty directory is removed');
});

t.test('relative paths, paths outside the kubelet dir and symlink escapes are INVALID_ARGUMENT', async (t) => {
  const { node, sys, kubelet, outside, umounts, pub } = setup(t);
  const victim = path.join(outside, 'victim');
  fs.mkdirSync(victim);
  sys.addMount({ target: victim, source: SOURCE, fstype: 'nfs4' });
  fs.symlinkSync('/', path.join(kubelet, 'pods', 'to-root'));
  fs.symlinkSync(outside, path.join(kubelet, 'pods', 'to-outside'));
  const paths = [
    'pods/p1/mount',
    victim,
    `${kubelet}/../outside/victim`,
    `${kubelet}x/pods`,
    kubelet,
    path.join(kubelet, 'pods', 'to-root'),
    path.join(kubelet, 'pods', 'to-outside', 'victim'),
    path.join(kubelet, 'pods', 'to-outside', 'new'),
  ];
  for (const p of paths) {
    t.equal(
      code(await rejection(node.nodeUnpublishVolume({ volumeId: VOL, targetPath: p }, ctx))),
      'InvalidArgument',
      `unpublish ${p}`,
    );
    t.equal(code(await rejection(node.nodePublishVolume(pub(p), ctx))), 'InvalidArgument', `publish ${p}`);
    const stats = await rejection(
      node.nodeGetVolumeStats({ volumeId: VOL, volumePath: p, stagingTargetPath: '' }, ctx),
    );
    t.equal(code(stats), p.startsWith('/') ? 'InvalidArgument' : 'NotFound', `stats ${p}`);
  }
  t.same(umounts(), [], 'nothing unmounted');
  t.same(
    sys.commands.filter((c) => c[0] === 'mount'),
    [],
    'nothing mounted',
  );
  t.ok(fs.lstatSync(path.join(kubelet, 'pods', 'to-root')).isSymbolicLink(), 'planted symlink kept');
  t.notOk(fs.existsSync(path.join(outside, 'new')), 'nothing created outside');
});

t.test('publish over a stale mount of another export does not force-unmount it', async (t) => {
  const { node, sys, kubelet, umounts, pub } = setup(t);
  const target = path.join(kubelet, 'pods', 'p7', 'mount');
  fs.mkdirSync(target, { recursive: true });
  sys.addMount({ target, source: '127.0.0.1:/volume1/k8s-volumes/talos/someone/else', fstype: 'nfs4' });
  sys.intercept((cmd, args) =>
    cmd === 'stat' && args.includes(target) ? Promise.reject(fail(cmd, args, 1, 'stat: Stale file handle')) : undefined,
  );
  const err = await rejection(node.nodePublishVolume(pub(target), ctx));
  t.not(code(err), 'not a CsiError: undefined', 'refused');
  t.same(umounts(), [], 'the other export stays mounted');
});

t.test(
  'the kubelet dir may itself be a symlink; a static PV (handle is only an ID) unmounts its NFS mount',
  async (t) => {
    const { root, sys, kubelet, umounts, pub } = setup(t);
    const link = path.join(root, 'kubelet-link');
    fs.symlinkSync(kubelet, link);
    const node = nfsNodeOn(sys, link, { mountTimeoutMs: 2000 });
    const target = path.join(link, 'pods', 'p8', 'mount');
    sys.interceptors.splice(0);
    await node.nodePublishVolume(pub(target, { volumeId: 'my-static-share' }), ctx);
    t.ok(
      sys.table.some((m) => m.target === path.join(kubelet, 'pods', 'p8', 'mount')),
      'mounted at the real path',
    );
    await node.nodeUnpublishVolume({ volumeId: 'my-static-share', targetPath: target }, ctx);
    t.equal(umounts().length, 1);
    t.notOk(fs.existsSync(target));
  },
);
