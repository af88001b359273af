// The NFS node backend. This host has no NFS client, so mounts run against the fake executor
// (exact commands asserted); the mount-timeout kill runs a real process tree.
import t from 'tap';
import { validate } from '../../../../src/csi/validate.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { implemented } from '../../../helpers/implemented.js';
import { createNfsNode, type NfsNodeOptions } from '../../../../src/nfs/node/node.js';
import { parseNfsContext, sameNfsSource } from '../../../../src/nfs/node/context.js';
import { isCsiError } from '../../../../src/errors.js';
import { createExec } from '../../../../src/os/exec.js';
import { createLinuxMounter } from '../../../../src/os/mounter.js';
import type { CallContext, NodePublishVolumeRequest, VolumeCapability } from '../../../../src/csi/types.js';
import { FakeSystem, fail, timeout } from '../../os/fakes.js';
import { rejection } from '../../../helpers/rejection.js';
import { nfsNodeOn } from './fixture.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);
type Mode =
  | 'SINGLE_NODE_WRITER'
  | 'SINGLE_NODE_SINGLE_WRITER'
  | 'SINGLE_NODE_MULTI_WRITER'
  | 'MULTI_NODE_MULTI_WRITER'
  | 'MULTI_NODE_READER_ONLY';
const cap = (mountFlags: string[] = [], mode: Mode = 'MULTI_NODE_MULTI_WRITER'): VolumeCapability => ({
  mount: { fsType: '', mountFlags, volumeMountGroup: '' },
  accessMode: { mode },
  accessType: 'mount',
});

function setup(t: { teardown(fn: () => void): void }, opts: Partial<NfsNodeOptions> = {}) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'nfs-node-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sys = new FakeSystem();
  const node = implemented(nfsNodeOn(sys, dir, opts), ['nodeGetVolumeStats']);
  const req = (extra: Partial<NodePublishVolumeRequest> = {}): NodePublishVolumeRequest => ({
    volumeId: '127.0.0.1#volume1/k8s-volumes/talos#media/data#pvc-1#archive',
    publishContext: {},
    stagingTargetPath: '',
    targetPath: path.join(dir, 'pods', 'p1', 'mount'),
    volumeCapability: cap(),
    readonly: false,
    secrets: {},
    volumeContext: { server: '127.0.0.1', share: '/volume1/k8s-volumes/talos', subDir: 'media/data' },
    ...extra,
  });
  return { dir, sys, node, req };
}

t.test('volume context parsing follows csi-driver-nfs', async (t) => {
  const v = parseNfsContext(
    {
      Server: 'nas.local',
      SHARE: '/volume1/k8s-volumes/talos/',
      subdir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
      'csi.storage.k8s.io/pvc/namespace': 'media',
      'csi.storage.k8s.io/pvc/name': 'data',
      MountOptions: 'nfsvers=4.1, hard ,,nconnect=4',
      mountPermissions: '0775',
    },
    'v',
  );
  t.equal(v.source, 'nas.local:/volume1/k8s-volumes/talos/media/data');
  t.same(v.mountOptions, ['nfsvers=4.1', 'hard', 'nconnect=4']);
  t.equal(v.mountPermissions, 0o775);
  t.equal(
    parseNfsContext({ server: 'fd00::5', share: '/export' }, 'v').source,
    '[fd00::5]:/export',
    'IPv6 in brackets',
  );
  t.equal(parseNfsContext({ server: 's', share: '/' }, 'v').source, 's:/');
  t.throws(() => parseNfsContext({ share: '/x' }, 'v'), { kind: 'InvalidArgument', message: /"server" is required/ });
  t.throws(() => parseNfsContext({ server: 's' }, 'v'), { kind: 'InvalidArgument', message: /"share" is required/ });
  t.throws(() => parseNfsContext({ server: 's', share: '/x', subDir: 'a/../../etc' }, 'v'), {
    kind: 'InvalidArgument',
    message: /\.\./,
  });
  t.throws(() => parseNfsContext({ server: 's', share: '/x', mountPermissions: '0999' }, 'v'), {
    kind: 'InvalidArgument',
    message: /octal/,
  });
  t.throws(() => parseNfsContext({ server: 's', share: '/x', subDir: '${pv.metadata.name}' }, 'v'), {
    kind: 'InvalidArgument',
    message: /template/,
  });
  t.ok(sameNfsSource('s:/a//b/', 's:/a/b'));
  t.notOk(sameNfsSource('s:/a/b', 't:/a/b'));
});

t.test('publish runs one bounded kernel mount with flags, ro, mountOptions and test ports', async (t) => {
  const { sys, node, req } = setup(t, { nfsPort: 20049, nfsMountPort: 20048, mountTimeoutMs: 4321 });
  const r = req({
    volumeCapability: cap(['vers=4.1', 'noatime'], 'MULTI_NODE_READER_ONLY'),
    readonly: true,
    volumeContext: {
      server: '127.0.0.1',
      share: '/volume1/k8s-volumes/talos',
      subDir: 'media/data',
      mountOptions: 'nconnect=4,noatime',
    },
  });
  await node.nodePublishVolume(r, ctx);
  t.same(
    sys.commands.filter((c) => c[0] === 'mount'),
    [
      [
        'mount',
        '-t',
        'nfs',
        '-o',
        'vers=4.1,noatime,ro,nconnect=4,port=20049,mountport=20048',
        '127.0.0.1:/volume1/k8s-volumes/talos/media/data',
        r.targetPath,
      ],
    ],
  );
  t.equal(sys.calls.find((c) => c.cmd === 'mount')?.timeoutMs, 4321, 'mount runs under mountTimeoutMs');
  t.ok(fs.statSync(r.targetPath).isDirectory(), 'target created');

  await node.nodePublishVolume(r, ctx);
  t.equal(sys.commands.filter((c) => c[0] === 'mount').length, 1, 'second publish finds it mounted');

  const { sys: sys2, node: node2, req: req2 } = setup(t, { nfsPort: 20049 });
  await node2.nodePublishVolume(req2({ volumeContext: { server: 's', share: '/x', mountOptions: 'port=2049' } }), ctx);
  t.match(sys2.commands.find((c) => c[0] === 'mount')?.[4], /^port=2049$/, 'an explicit port wins over the test port');
});

t.test('static PVs: volumeAttributes without subDir mount the share itself', async (t) => {
  const { sys, node, req } = setup(t);
  await node.nodePublishVolume(req({ volumeContext: { server: 'nas.local', share: '/volume1/media' } }), ctx);
  t.equal(sys.commands.find((c) => c[0] === 'mount')?.[3], 'nas.local:/volume1/media');
});

t.test('mountPermissions: chmod after mount, only when non-zero and not read-only', async (t) => {
  const { node, req } = setup(t);
  const a = req({ volumeContext: { server: 's', share: '/x', mountPermissions: '0777' } });
  await node.nodePublishVolume(a, ctx);
  t.equal(fs.statSync(a.targetPath).mode & 0o7777, 0o777);

  const { node: n2, req: r2 } = setup(t);
  const b = r2({ readonly: true, volumeContext: { server: 's', share: '/x', mountPermissions: '0777' } });
  await n2.nodePublishVolume(b, ctx);
  t.not(fs.statSync(b.targetPath).mode & 0o7777, 0o777, 'read-only: left alone');

  const { node: n3, req: r3 } = setup(t, { defaultMountPermissions: 0 });
  const c = r3({ volumeContext: { server: 's', share: '/x', mountPermissions: '0' } });
  await n3.nodePublishVolume(c, ctx);
  t.equal(fs.statSync(c.targetPath).mode & 0o7777, 0o750, 'zero: left as created');
});

t.test('a stale handle on the target is unmounted and mounted again', async (t) => {
  const { sys, node, req } = setup(t);
  const r = req();
  fs.mkdirSync(r.targetPath, { recursive: true });
  sys.addMount({ target: r.targetPath, source: '127.0.0.1:/volume1/k8s-volumes/talos/media/data', fstype: 'nfs4' });
  let stale = true;
  sys.intercept((cmd, args) => {
    if (cmd === 'stat' && stale && args.includes(r.targetPath))
      return Promise.reject(fail(cmd, args, 1, `stat: cannot statx '${r.targetPath}': Stale file handle`));
    if (cmd === 'umount') stale = false;
    return undefined;
  });
  await node.nodePublishVolume(r, ctx);
  t.same(
    sys.commands.filter((c) => c[0] !== 'stat'),
    [
      ['umount', '--no-canonicalize', r.targetPath],
      ['mount', '-t', 'nfs', '127.0.0.1:/volume1/k8s-volumes/talos/media/data', r.targetPath],
    ],
  );
  t.equal(sys.table.length, 1);
});

t.test('an existing mount that hangs is reported, not remounted on top', async (t) => {
  const { sys, node, req } = setup(t);
  const r = req();
  sys.addMount({ target: r.targetPath, source: '127.0.0.1:/volume1/k8s-volumes/talos/media/data', fstype: 'nfs4' });
  sys.intercept((cmd, args) => (cmd === 'stat' ? Promise.reject(timeout(cmd, args)) : undefined));
  t.equal(code(await rejection(node.nodePublishVolume(r, ctx))), 'Unavailable');
  t.same(
    sys.commands.filter((c) => c[0] === 'mount' || c[0] === 'umount'),
    [],
  );
});

t.test('target holding something else, or the same share with another ro flag: AlreadyExists', async (t) => {
  const { sys, node, req } = setup(t);
  const r = req();
  fs.mkdirSync(r.targetPath, { recursive: true });
  sys.addMount({ target: r.targetPath, source: 'other:/export', fstype: 'nfs4' });
  t.equal(code(await rejection(node.nodePublishVolume(r, ctx))), 'AlreadyExists');
  sys.table.splice(0);
  sys.addMount({
    target: r.targetPath,
    source: '127.0.0.1:/volume1/k8s-volumes/talos/media/data',
    fstype: 'nfs4',
    options: ['ro'],
  });
  t.equal(code(await rejection(node.nodePublishVolume(r, ctx))), 'AlreadyExists');
});

t.test('single-node-single-writer: a second target on this node is refused', async (t) => {
  const { node, req, dir } = setup(t);
  const first = req({ volumeCapability: cap([], 'SINGLE_NODE_SINGLE_WRITER') });
  await node.nodePublishVolume(first, ctx);
  await node.nodePublishVolume(first, ctx);
  const other = { ...first, targetPath: path.join(dir, 'pods', 'p2', 'mount') };
  t.equal(code(await rejection(node.nodePublishVolume(other, ctx))), 'FailedPrecondition');
  await node.nodePublishVolume({ ...other, volumeCapability: cap([], 'SINGLE_NODE_MULTI_WRITER') }, ctx);
  t.pass('single-node-multi-writer may publish twice');
});

t.test('bad requests are InvalidArgument', async (t) => {
  const { node, req } = setup(t);
  const block: VolumeCapability = { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' };
  t.match(await rejection(node.nodePublishVolume(req({ volumeCapability: block }), ctx)), {
    kind: 'InvalidArgument',
    message: /mount access type/,
  });
  t.match(await rejection(node.nodePublishVolume(req({ volumeContext: { share: '/x' } }), ctx)), {
    kind: 'InvalidArgument',
    message: /server/,
  });
  // Required fields (target_path and the rest) are checked once, by the Node service before
  // the backend (src/csi/validate.ts, test/integration/server/validate.test.ts).
  t.throws(() => validate.nodePublishVolume({ ...req({}), targetPath: '' }, false), {
    kind: 'InvalidArgument',
    message: /target_path/,
  });
  t.match(await rejection(node.nodePublishVolume(req({ volumeCapability: null }), ctx)), {
    kind: 'InvalidArgument',
    message: /volume_capability/,
  });
});

t.test('mount failures become errors a person can act on', async (t) => {
  const cases: Array<[string, string]> = [
    ['mount.nfs: access denied by server while mounting 127.0.0.1:/x', 'FailedPrecondition'],
    ['mount.nfs: Connection refused', 'Unavailable'],
    ['mount.nfs: an incorrect mount option was specified', 'InvalidArgument'],
    ['mount.nfs: mounting 127.0.0.1:/x failed, reason given by server: No such file or directory', 'NotFound'],
    ['mount: something odd', 'Internal'],
  ];
  for (const [stderr, kind] of cases) {
    const { sys, node, req } = setup(t);
    sys.intercept((cmd, args) => (cmd === 'mount' ? Promise.reject(fail(cmd, args, 32, stderr)) : undefined));
    const err = await rejection(node.nodePublishVolume(req(), ctx));
    t.equal(code(err), kind, stderr);
    t.match(err.message, stderr);
  }
  const { sys, node, req } = setup(t);
  sys.intercept((cmd, args) => (cmd === 'mount' ? Promise.reject(timeout(cmd, args, 5000)) : undefined));
  const err = await rejection(node.nodePublishVolume(req(), ctx));
  t.equal(code(err), 'DeadlineExceeded');
  t.match(err.message, /did not finish within 5000 ms; the mount process was killed/);
});

t.test('a hanging mount is killed with its children when the timeout passes', async (t) => {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'nfs-hang-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  // Stands in for mount → mount.nfs stuck on an unreachable server.
  const fakeMount = path.join(dir, 'fake-mount');
  const pidFile = path.join(dir, 'helper.pid');
  fs.writeFileSync(fakeMount, `#!/bin/sh\nsleep 60 &\necho $! > ${pidFile}\nwait\n`, { mode: 0o755 });
  const exec = createExec({ reapGraceMs: 500 });
  const node = createNfsNode({
    nodeId: 'n',
    log: pino({ level: 'silent' }),
    mountTimeoutMs: 400,
    kubeletDir: dir,
    exec,
    mounter: createLinuxMounter({ exec, bin: { mount: fakeMount } }),
  });
  const target = path.join(dir, 'target');
  const started = Date.now();
  const err = await rejection(
    node.nodePublishVolume(
      {
        volumeId: 'v',
        publishContext: {},
        stagingTargetPath: '',
        targetPath: target,
        volumeCapability: cap(),
        readonly: false,
        secrets: {},
        volumeContext: { server: '127.0.0.1', share: '/unreachable' },
      },
      ctx,
    ),
  );
  const elapsed = Date.now() - started;
  t.equal(code(err), 'DeadlineExceeded');
  t.ok(elapsed < 3000, `returned after ${elapsed} ms`);
  const helper = Number(fs.readFileSync(pidFile, 'utf8'));
  let alive = true;
  for (let i = 0; i < 20 && alive; i++) {
    try {
      process.kill(helper, 0);
      const st = fs.readFileSync(`/proc/${helper}/stat`, 'utf8');
      alive = !st.slice(st.lastIndexOf(')') + 2).startsWith('Z');
    } catch {
      alive = false;
    }
    if (alive) await new Promise((r) => setTimeout(r, 50));
  }
  t.notOk(alive, 'the mount helper child was killed too');
});

t.test('unpublish: unmount, remove the target, idempotent; a dead server gets -f then -l', async (t) => {
  const { sys, node, req } = setup(t, { unmountTimeoutMs: 700 });
  const r = req();
  await node.nodePublishVolume(r, ctx);
  await node.nodeUnpublishVolume({ volumeId: r.volumeId, targetPath: r.targetPath }, ctx);
  t.notOk(fs.existsSync(r.targetPath), 'target removed');
  t.same(
    sys.commands.filter((c) => c[0] === 'umount'),
    [['umount', '--no-canonicalize', r.targetPath]],
  );
  await node.nodeUnpublishVolume({ volumeId: r.volumeId, targetPath: r.targetPath }, ctx);
  t.pass('second unpublish is OK');

  fs.mkdirSync(r.targetPath, { recursive: true });
  sys.addMount({ target: r.targetPath, source: '127.0.0.1:/volume1/k8s-volumes/talos/media/data', fstype: 'nfs4' });
  sys.calls.splice(0);
  sys.intercept((cmd, args) => {
    if (cmd !== 'umount') return undefined;
    if (args.includes('-l')) {
      sys.table.splice(0);
      return Promise.resolve({ stdout: '', stderr: '', exitCode: 0 });
    }
    return Promise.reject(timeout(cmd, args, 700));
  });
  await node.nodeUnpublishVolume({ volumeId: r.volumeId, targetPath: r.targetPath }, ctx);
  t.same(
    sys.commands.filter((c) => c[0] === 'umount').map((c) => c[2]),
    [r.targetPath, '-f', '-l'],
  );
  t.ok(sys.calls.filter((c) => c.cmd === 'umount').every((c) => c.timeoutMs === 700));
  t.notOk(fs.existsSync(r.targetPath));
});

// statfs of an NFS mount is the whole share: the claim's own usage (the soft-quota metrics) is
// measured apart, and a stats call hands the volume to that measurement without waiting for it.
t.test('stats: each answered stats call hands the volume to the usage measurement', async (t) => {
  const seen: string[] = [];
  const usage = {
    defs: [],
    snapshot: () => [],
    idle: async () => {},
    observe: (id: string, p: string) => void seen.push(`${id} ${p}`),
  };
  const { node, req } = setup(t, { usage });
  const r = req();
  await node.nodePublishVolume(r, ctx);
  await node.nodeGetVolumeStats({ volumeId: r.volumeId, volumePath: r.targetPath, stagingTargetPath: '' }, ctx);
  t.same(seen, [`${r.volumeId} ${r.targetPath}`]);
});

t.test('stats via statfs; missing path NotFound; stale mount abnormal', async (t) => {
  const { sys, node, req, dir } = setup(t);
  const r = req();
  await node.nodePublishVolume(r, ctx);
  const st = await node.nodeGetVolumeStats(
    { volumeId: r.volumeId, volumePath: r.targetPath, stagingTargetPath: '' },
    ctx,
  );
  t.same(
    st.usage?.map((u) => u.unit),
    ['BYTES', 'INODES'],
  );
  t.ok(Number(st.usage?.[0]?.total) > 0);
  t.equal(st.volumeCondition?.abnormal, false);
  t.equal(
    code(
      await rejection(node.nodeGetVolumeStats({ volumeId: 'v', volumePath: 'some/path', stagingTargetPath: '' }, ctx)),
    ),
    'NotFound',
    'relative path: no volume there (csi-sanity)',
  );
  t.equal(
    code(
      await rejection(
        node.nodeGetVolumeStats({ volumeId: 'v', volumePath: path.join(dir, 'missing'), stagingTargetPath: '' }, ctx),
      ),
    ),
    'NotFound',
  );
  fs.mkdirSync(path.join(dir, 'plain'));
  t.equal(
    code(
      await rejection(
        node.nodeGetVolumeStats({ volumeId: 'v', volumePath: path.join(dir, 'plain'), stagingTargetPath: '' }, ctx),
      ),
    ),
    'NotFound',
    'not mounted',
  );
  sys.intercept((cmd, args) =>
    cmd === 'stat' && args.includes(r.targetPath)
      ? Promise.reject(fail(cmd, args, 1, 'stat: Stale file handle'))
      : undefined,
  );
  const stale = await node.nodeGetVolumeStats(
    { volumeId: r.volumeId, volumePath: r.targetPath, stagingTargetPath: '' },
    ctx,
  );
  t.equal(stale.volumeCondition?.abnormal, true);
  t.match(stale.volumeCondition?.message, /ESTALE/);
});

t.test('NodeGetInfo is the node id only; capabilities are what works', async (t) => {
  const { node } = setup(t);
  t.same(await node.nodeGetInfo(ctx), { nodeId: 'talos-w1' });
  t.same(node.capabilities, ['GET_VOLUME_STATS', 'VOLUME_CONDITION', 'SINGLE_NODE_MULTI_WRITER']);
  t.equal(node.nodeStageVolume, undefined);
  t.equal(node.nodeExpandVolume, undefined);
});

t.test(
  'inline (ephemeral) volume: the pod spec attributes are mounted as they are, nothing else is done',
  async (t) => {
    const { node, sys, req } = setup(t);
    // What kubelet sends for a `csi:` volume in a pod spec (podInfoOnMount off): a generated id,
    // the pod's volumeAttributes and the ephemeral marker.
    const inline = req({
      volumeId: 'csi-5b6d9c0c4a3f1e2d7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f',
      volumeCapability: cap([], 'SINGLE_NODE_WRITER'),
      volumeContext: {
        server: 'nas.local.bigd.no',
        share: '/volume1/shared-data',
        subDir: 'media/reelsmith',
        mountOptions: 'nfsvers=4.1,hard',
        'csi.storage.k8s.io/ephemeral': 'true',
      },
    });
    await node.nodePublishVolume(inline, ctx);
    const mount = sys.commands.find((c) => c[0] === 'mount');
    t.same(mount, [
      'mount',
      '-t',
      'nfs',
      '-o',
      'nfsvers=4.1,hard',
      'nas.local.bigd.no:/volume1/shared-data/media/reelsmith',
      inline.targetPath,
    ]);
    await node.nodePublishVolume(inline, ctx);
    t.equal(sys.commands.filter((c) => c[0] === 'mount').length, 1, 'a repeated publish mounts nothing more');
    await node.nodeUnpublishVolume({ volumeId: inline.volumeId, targetPath: inline.targetPath }, ctx);
    t.equal(sys.table.length, 0, 'unmounted');
    t.notOk(fs.existsSync(inline.targetPath), 'target removed');
    t.same(
      sys.commands.map((c) => c[0]).filter((c) => c !== 'stat'),
      ['mount', 'umount'],
      'only mount and umount ran: no mkdir, chmod or rm on the share',
    );

    const templated = await rejection(
      node.nodePublishVolume(
        req({
          volumeContext: {
            server: 's',
            share: '/x',
            subDir: '${pvc.metadata.name}',
            'csi.storage.k8s.io/ephemeral': 'true',
          },
        }),
        ctx,
      ),
    );
    t.equal(code(templated), 'InvalidArgument');
    t.match(templated.message, /an inline volume has no claim/);
  },
);
