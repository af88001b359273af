// The image tier: the image scripts/image.sh built from the real Dockerfile, run with podman
// (runc) the way Kubernetes runs it: the controller as uid 65532 on a read-only root, the node
// plugin privileged on a loop disk. Run by `npm run image` (needs IMAGE and the CONTAINERS_*
// variables that script sets); not part of the unit tier.
import t from 'tap';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { csiClient } from '../helpers/csi-client.js';
import { stageAndPublish, unpublishAndUnstage, type StagedVolume } from '../helpers/stage-publish.js';
import { canUseLoopDevices, LoopRig } from '../integration/node/loop-rig.js';
import { wwnHexForSlot as wwnForSlot } from '../../src/proxmox/contract.js';
import { HOST_NODE, nodeIdentityArgs, startProxmoxBackend } from '../harness/backends.js';

const IMAGE = process.env.IMAGE ?? '';
if (!IMAGE || !process.env.CONTAINERS_STORAGE_CONF)
  throw new Error('run through scripts/image.sh (IMAGE and CONTAINERS_* unset)');
/** The image's size budget (bytes, as podman reports it); see docs/image.md for what is in it.
 * Back to 350 MB: the image carries the esbuild bundle (scripts/bundle.ts, ~4 MB) instead of the
 * production node_modules (74 MB, half of it @kubernetes/client-node, which had pushed it to 379). */
const SIZE_BUDGET = 350 * 1000 * 1000;
const MiB = 1024 * 1024;
const execFileP = promisify(execFile);

// crun refuses this machine's hybrid cgroups; podman's default rlimits exceed what the sandbox
// lets it raise.
const RUN = ['run', '--runtime', 'runc', '--ulimit', 'nofile=20000:20000', '--ulimit', 'nproc=32768:32768'];

const podman = (...args: string[]) =>
  execFileSync('podman', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
/** A shell script run in a throw-away container of the image; its output. */
const shInImage = (script: string) => podman(...RUN, '--rm', '--entrypoint', '/bin/sh', IMAGE, '-c', script);
const podmanP = async (...args: string[]) => (await execFileP('podman', args, { encoding: 'utf8' })).stdout.trim();

function tempDir(t: { teardown(fn: () => void): void }, mode = 0o755): string {
  const d = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'image-tier-')));
  fs.chmodSync(d, mode);
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

/** Starts a detached container; removed (killed) in teardown whatever happens. */
function startContainer(
  t: { teardown(fn: () => void | Promise<void>): void },
  name: string,
  args: string[],
  cmd: string[],
): string {
  const id = podman(...RUN, '-d', '--name', `${name}-${process.pid}`, ...args, IMAGE, ...cmd);
  t.teardown(() => {
    try {
      podman('rm', '-f', '-t', '0', id);
    } catch {
      /* gone */
    }
  });
  return id;
}

async function waitForSocket(file: string, id: string, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (fs.existsSync(file)) return;
    if (podman('inspect', '--format', '{{.State.Running}}', id) !== 'true') break;
    await sleep(100);
  }
  throw new Error(`${file} did not appear; container log:\n${podman('logs', id)}`);
}

/** PID (in the container) and status lines of the node process. */
function nodeProcess(id: string): { pid: string; uid: string; env: string } {
  const out = podman(
    'exec',
    id,
    'sh',
    '-c',
    // By executable: Node 24 names its main thread "MainThread" in comm.
    'for p in /proc/[0-9]*; do [ "$(readlink $p/exe 2>/dev/null)" = /usr/local/bin/node ] || continue; ' +
      'echo "${p#/proc/}"; grep "^Uid:" $p/status; tr "\\0" "\\n" <$p/environ | grep "^NODE_OPTIONS=" || echo NODE_OPTIONS=; break; done',
  );
  const [pid = '', uid = '', env = ''] = out.split('\n');
  return { pid, uid: uid.split(/\s+/)[1] ?? '', env: env.slice('NODE_OPTIONS='.length) };
}

t.test('image size within budget', async (t) => {
  const size = Number(podman('image', 'inspect', '--format', '{{.Size}}', IMAGE));
  console.log(`# image ${IMAGE}: ${(size / 1e6).toFixed(1)} MB (budget ${SIZE_BUDGET / 1e6} MB)`);
  t.ok(size > 0 && size <= SIZE_BUDGET, `${(size / 1e6).toFixed(1)} MB <= ${SIZE_BUDGET / 1e6} MB`);
});

t.test("the bundle's V8 code cache is used by both of the image's users, on a read-only root", async (t) => {
  // --version loads main.js and what it imports statically; Node says whether it took the cache.
  for (const user of ['65532', '0']) {
    const out = podman(
      ...RUN,
      '--rm',
      '--read-only',
      '--user',
      user,
      '-e',
      'NODE_DEBUG_NATIVE=COMPILE_CACHE',
      '--entrypoint',
      '/bin/sh',
      IMAGE,
      '-c',
      '/app/entrypoint.sh --version 2>&1',
    );
    t.match(
      out,
      /code cache for ESM file:\/\/\/app\/dist\/bundle\/main\.js was accepted/,
      `uid ${user}: main.js from the cache`,
    );
    t.notMatch(out, /was rejected|Cannot/, `uid ${user}: nothing rejected`);
  }
});

t.test('every tool the node plugin runs is in the image', async (t) => {
  // src/os (mounter, statfs, blockdevices), mount -t nfs → mount.nfs, LUKS → cryptsetup;
  // tini is the entrypoint.
  const tools = [
    'mount',
    'umount',
    'findmnt',
    'stat',
    'blkid',
    'blockdev',
    'mkfs.ext4',
    'mkfs.xfs',
    'resize2fs',
    'xfs_growfs',
    'mount.nfs',
    'cryptsetup',
    'tini',
  ];
  const out = shInImage(
    `for t in ${tools.join(' ')}; do command -v "$t" >/dev/null && echo "ok $t" || echo "missing $t"; done`,
  );
  for (const tool of tools) t.match(out, new RegExp(`^ok ${tool.replace('.', '\\.')}$`, 'm'), tool);
  // Installed but broken (a missing library) counts as missing.
  const versions = shInImage('mkfs.xfs -V && cryptsetup --version && mount.nfs -V && tini --version && node --version');
  t.match(versions, /cryptsetup 2\./, 'cryptsetup runs');
  t.match(versions, /^v24\./m, 'node 24 runs');
});

t.test(
  'controller: uid 65532, read-only root, both sockets answer Probe, heap from the memory limit, clean SIGTERM, zombies reaped',
  async (t) => {
    const runDir = tempDir(t);
    const backends = await startProxmoxBackend(runDir, { backend: 'none' });
    t.teardown(() => backends.close());
    // The container user reads the simulator's config and CA, and creates the sockets.
    execFileSync('chmod', ['-R', 'a+rX', runDir]);
    const sock = tempDir(t, 0o777);
    const id = startContainer(
      t,
      'pve-nfs-csi-controller',
      [
        '--read-only',
        '--read-only-tmpfs=false',
        '--network',
        'host',
        '--memory',
        '256m',
        '-v',
        `${sock}:/csi`,
        '-v',
        `${runDir}:${runDir}:ro`,
      ],
      [
        '--mode',
        'controller',
        '--proxmox-endpoint',
        'unix:///csi/proxmox.sock',
        '--nfs-endpoint',
        'unix:///csi/nfs.sock',
        ...backends.controllerArgs,
      ],
    );
    await waitForSocket(path.join(sock, 'proxmox.sock'), id);
    await waitForSocket(path.join(sock, 'nfs.sock'), id);

    for (const [drv, name] of [
      ['proxmox', 'csi.proxmox.sinextra.dev'],
      ['nfs', 'nfs.csi.k8s.io'],
    ]) {
      const c = csiClient(`unix://${path.join(sock, `${drv}.sock`)}`, 10_000);
      t.teardown(() => c.close());
      t.equal((await c.identity.GetPluginInfo()).name, name, `${drv} socket serves ${name}`);
      t.same((await c.identity.Probe()).ready, { value: true }, `${drv} Probe ready`);
    }
    // The bundled Proxmox half end to end (HTTP client, YAML config, int64 fields as strings).
    const px = csiClient(`unix://${path.join(sock, 'proxmox.sock')}`, 10_000);
    t.teardown(() => px.close());
    const created = await px.controller.CreateVolume({
      name: `pvc-image-${process.pid}`,
      capacityRange: { requiredBytes: '1073741824' },
      volumeCapabilities: [{ mount: { fsType: 'ext4', mountFlags: [] }, accessMode: { mode: 'SINGLE_NODE_WRITER' } }],
      parameters: backends.volumeParameters,
      accessibilityRequirements: {
        preferred: [
          {
            segments: {
              'topology.kubernetes.io/region': HOST_NODE.region,
              'topology.kubernetes.io/zone': HOST_NODE.zone,
            },
          },
        ],
      },
    });
    t.equal(created.volume?.capacityBytes, '1073741824', 'CreateVolume on the simulator: 1 GiB');
    await px.controller.DeleteVolume({ volumeId: created.volume?.volumeId ?? '' });
    t.pass('DeleteVolume');

    t.equal(podman('exec', id, 'cat', '/proc/1/comm'), 'tini', 'PID 1 is tini');
    const node = nodeProcess(id);
    t.equal(node.uid, '65532', 'node runs as uid 65532');
    t.equal(podman('exec', id, 'id', '-u'), '65532', 'the image user is 65532');
    // (256 MiB - 96 MiB) / 2: image/entrypoint.sh read the container's cgroup limit.
    t.equal(node.env, '--max-old-space-size=80', 'heap sized from the 256 MiB memory limit');
    const write = await podmanP('exec', id, 'sh', '-c', 'touch /app/x /tmp/x 2>&1; echo rc=$?').catch((e: unknown) =>
      String(e),
    );
    t.match(write, /Read-only file system/, 'the root filesystem is read-only');

    // A double fork: the grandchild is orphaned inside the container, reparented to PID 1, and
    // must be reaped when it exits. Node as PID 1 would leave it a zombie.
    const orphan = podman('exec', id, 'sh', '-c', 'sh -c "sleep 1 & echo \\$!"');
    t.match(orphan, /^\d+$/, 'orphan pid');
    await sleep(2500);
    const state = podman('exec', id, 'sh', '-c', `grep '^State:' /proc/${orphan}/status 2>/dev/null || echo gone`);
    t.equal(state, 'gone', `the orphan ${orphan} was reaped (not a zombie: ${state})`);

    const t0 = Date.now();
    // Async: the test's own gRPC clients must stay responsive while the server closes (a blocked
    // event loop here would hold the HTTP/2 sessions open until the drain timeout).
    await podmanP('stop', '-t', '20', id);
    const stopMs = Date.now() - t0;
    t.equal(podman('inspect', '--format', '{{.State.ExitCode}}', id), '0', 'SIGTERM: exit code 0', {
      logs: podman('logs', id).split('\n').slice(-8),
    });
    t.ok(stopMs < 10_000, `SIGTERM: stopped in ${stopMs} ms, without podman's SIGKILL`);
    t.notOk(fs.existsSync(path.join(sock, 'proxmox.sock')), 'socket removed on exit');
  },
);

t.test('privileged node plugin stages and publishes a loop-device volume', { skip: canUseLoopDevices() }, async (t) => {
  const rig = new LoopRig(t);
  const wwn = wwnForSlot(3);
  const disk = rig.addDisk(512 * MiB, wwn); // mkfs.xfs wants 300 MB at least
  const kubelet = rig.path('kubelet');
  fs.mkdirSync(kubelet);
  // Mounts stay in the container's mount namespace (private bind): the checks look from inside,
  // and a failed run leaves nothing mounted on the host when the container goes.
  const id = startContainer(
    t,
    'pve-nfs-csi-node',
    ['--privileged', '--user', '0', '--read-only', '--network', 'host', '-v', `${rig.root}:${rig.root}`],
    [
      '--mode',
      'node',
      '--proxmox-endpoint',
      `unix://${rig.root}/proxmox.sock`,
      ...nodeIdentityArgs(),
      '--device-dir',
      rig.devDir,
      '--kubelet-dir',
      kubelet,
    ],
  );
  await waitForSocket(path.join(rig.root, 'proxmox.sock'), id);
  const c = csiClient(`unix://${rig.root}/proxmox.sock`, 60_000);
  t.teardown(() => c.close());

  const volume: StagedVolume = {
    volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-image-tier',
    publishContext: { DevicePath: `/dev/disk/by-id/wwn-0x${wwn}`, lun: '3' },
    volumeCapability: { mount: { fsType: 'xfs' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } },
    stagingTargetPath: path.join(kubelet, 'stage'),
    targetPath: path.join(kubelet, 'pods/p/volumes/v/mount'),
  };
  const { stagingTargetPath: staging, targetPath: target } = volume;
  await stageAndPublish(c, volume);
  const mounted = podman('exec', id, 'findmnt', '-n', '-o', 'SOURCE,FSTYPE', target);
  t.match(mounted, new RegExp(`^${disk.device}\\s+xfs$`), `target mounted from the loop disk: ${mounted}`);
  podman('exec', id, 'sh', '-c', `echo hello >${target}/f && sync`);
  t.equal(podman('exec', id, 'cat', `${staging}/f`), 'hello', 'written through the target, visible in staging');
  await unpublishAndUnstage(c, volume);
  t.equal(
    podman('exec', id, 'sh', '-c', `findmnt -rn -o TARGET | grep -c '^${kubelet}' || true`),
    '0',
    'nothing left mounted',
  );
  await podmanP('stop', '-t', '20', id);
  t.equal(podman('inspect', '--format', '{{.State.ExitCode}}', id), '0', 'node plugin: SIGTERM exit code 0', {
    logs: podman('logs', id).split('\n').slice(-8),
  });
  t.equal(
    execFileSync('blkid', ['-p', '-o', 'value', '-s', 'TYPE', disk.device], { encoding: 'utf8' }).trim(),
    'xfs',
    'the disk holds the xfs the container made',
  );
});
