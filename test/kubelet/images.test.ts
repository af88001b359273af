// The kubelet tier's own images (scripts/lib/kubelet-images.sh): each binary does its job, run
// directly and from its OCI archive with podman. The registrar is checked the way the kubelet's
// plugin watcher uses it: against the real program's NFS driver socket, over the kubelet's
// pluginregistration.v1 API. Cheap once the images are cached (a few seconds); run by the
// containers tier (`npm run test:containers`).
import t from 'tap';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { freePort } from '../helpers/free-port.js';
import { spawnProgram } from '../helpers/program.js';
import { tempDir } from '../helpers/temp-dir.js';
import { nodeIdentityArgs, socketEndpointArgs } from '../harness/backends.js';
import { spawnGuarded } from '../harness/reaper.js';

const execFileP = promisify(execFile);

/** NAME=value lines of the build script (it builds what is missing). */
function buildImages(): Record<string, string> {
  const out = execFileSync('bash', ['scripts/lib/kubelet-images.sh', 'pause', 'registrar', 'workload'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 15 * 60_000,
  });
  return Object.fromEntries(
    out
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

const img = buildImages();
const need = (k: string): string => {
  const v = img[k];
  if (v === undefined) throw new Error(`scripts/lib/kubelet-images.sh printed no ${k}`);
  return v;
};
// podman with the settings the images were built with (scripts/lib/containers.sh).
const podmanEnv = {
  ...process.env,
  CONTAINERS_STORAGE_CONF: need('CONTAINERS_STORAGE_CONF'),
  CONTAINERS_CONF: need('CONTAINERS_CONF'),
  CONTAINERS_REGISTRIES_CONF: need('CONTAINERS_REGISTRIES_CONF'),
};
const RUN = ['run', '--runtime', 'runc', '--ulimit', 'nofile=20000:20000', '--ulimit', 'nproc=32768:32768'];
const podman = async (...args: string[]) =>
  (await execFileP('podman', args, { encoding: 'utf8', env: podmanEnv })).stdout.trim();
/** A container of an OCI archive, run to its end: exit code and stdout. */
async function runArchive(archive: string, args: string[], cmd: string[]) {
  try {
    return { code: 0, out: await podman(...RUN, '--rm', ...args, `oci-archive:${archive}`, ...cmd) };
  } catch (e) {
    const err = e as { code?: number; stdout?: string };
    return { code: err.code ?? -1, out: (err.stdout ?? '').trim() };
  }
}
const jsonLines = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
const lastJson = (out: string) => JSON.parse(out.split('\n').filter(Boolean).at(-1) ?? '{}') as Record<string, unknown>;

t.test('archives: each names its image by the reference printed beside it', async (t) => {
  for (const name of ['PAUSE', 'REGISTRAR', 'WORKLOAD']) {
    const index = execFileSync('tar', ['-xOf', need(name), 'index.json'], { encoding: 'utf8' });
    const refs = (JSON.parse(index) as { manifests: { annotations?: Record<string, string> }[] }).manifests.map(
      (m) => m.annotations?.['org.opencontainers.image.ref.name'],
    );
    t.same(refs, [need(`${name}_REF`)], name);
  }
  t.equal(need('PAUSE_REF'), 'registry.k8s.io/pause:3.10.2', "containerd 2.4's default sandbox image");
  t.match(need('REGISTRAR_REF'), /^registry\.k8s\.io\/sig-storage\/csi-node-driver-registrar:v\d+\.\d+\.\d+$/);
});

t.test('pause: exits 0 on SIGTERM as PID 1 of its container, and at once', async (t) => {
  t.match(execFileSync(need('PAUSE_BIN'), ['-v'], { encoding: 'utf8' }), /^pause .+ \S+\n$/);
  const id = await podman(...RUN, '-d', `oci-archive:${need('PAUSE')}`);
  t.teardown(() => podman('rm', '-f', '-t', '0', id).catch(() => undefined));
  t.equal(await podman('inspect', '--format', '{{.State.Running}}', id), 'true');
  const t0 = Date.now();
  await podman('stop', '-t', '20', id);
  t.ok(Date.now() - t0 < 10_000, `stopped by SIGTERM, not the kill after 20 s (${Date.now() - t0} ms)`);
  t.equal(await podman('inspect', '--format', '{{.State.ExitCode}}', id), '0');
});

t.test('pause: reaps the zombies of the processes sharing its PID namespace', async (t) => {
  // A child that exits at once, spawned by a shell that then execs into pause: the zombie is
  // pause's to reap, as in a pod with a shared process namespace.
  const dir = tempDir(t, 'pause-');
  const child = spawnGuarded(
    'unshare',
    // --kill-child: unshare's forked child (pause, PID 1 of the namespace) dies with unshare;
    // without it the teardown's SIGKILL of unshare left pause running, reparented to init.
    ['--pid', '--fork', '--kill-child', '--mount-proc', 'sh', '-c', `sleep 0.2 & exec ${need('PAUSE_BIN')}`],
    {
      stdio: 'ignore',
      cwd: dir,
    },
  );
  t.teardown(() => void child.kill('SIGKILL'));
  await sleep(1500);
  const pausePid = execFileSync('pgrep', ['-P', String(child.pid)], { encoding: 'utf8' }).trim();
  // Zombies included: a child stays listed until its parent reaps it.
  const kids = fs.readFileSync(`/proc/${pausePid}/task/${pausePid}/children`, 'utf8').trim();
  t.equal(kids, '', `no child left under pause (zombie or not): "${kids}"`);
  child.kill('SIGTERM');
});

t.test('workload: write, then verify in a second container, as another user; a changed byte fails', async (t) => {
  const dir = tempDir(t, 'workload-');
  fs.chmodSync(dir, 0o777);
  const vol = ['-v', `${dir}:/data`];
  const w = await runArchive(need('WORKLOAD'), [...vol, '--hostname', 'writer-pod'], ['write', '--bytes', '100000']);
  t.equal(w.code, 0, w.out);
  const wr = lastJson(w.out);
  t.match(wr, { mode: 'write', ok: true, bytes: 100000, seed: 'writer-pod', path: '/data/data.bin' });
  const v = await runArchive(need('WORKLOAD'), [...vol, '--user', '1000:2000'], ['verify']);
  t.equal(v.code, 0, v.out);
  t.match(lastJson(v.out), { mode: 'verify', ok: true, sha256: wr.sha256, writer: 'writer-pod', uid: 1000, gid: 2000 });

  const fd = fs.openSync(path.join(dir, 'data.bin'), 'r+');
  fs.writeSync(fd, Buffer.from('x'), 0, 1, 4242);
  fs.closeSync(fd);
  const bad = await runArchive(need('WORKLOAD'), vol, ['verify']);
  t.equal(bad.code, 1, 'a changed byte fails verify');
  t.match(lastJson(bad.out), { ok: false, error: /recorded 100000/ });
  const none = await runArchive(need('WORKLOAD'), ['-v', `${tempDir(t, 'workload-')}:/data`], ['verify']);
  t.equal(none.code, 1, 'nothing written: verify fails');
  t.match(lastJson(none.out), { ok: false, error: /no record of an earlier write/ });
});

t.test('workload: --hold keeps a passed write running until SIGTERM, then exits 0', async (t) => {
  const dir = tempDir(t, 'workload-');
  const id = await podman(...RUN, '-d', '-v', `${dir}:/data`, `oci-archive:${need('WORKLOAD')}`, 'write', '--hold');
  t.teardown(() => podman('rm', '-f', '-t', '0', id).catch(() => undefined));
  for (let i = 0; i < 50 && !fs.existsSync(path.join(dir, 'data.bin.json')); i++) await sleep(100);
  t.equal(await podman('inspect', '--format', '{{.State.Running}}', id), 'true', 'still running after its write');
  t.match(jsonLines(await podman('logs', id))[0], { mode: 'write', ok: true });
  await podman('stop', '-t', '20', id);
  t.equal(await podman('inspect', '--format', '{{.State.ExitCode}}', id), '0');
});

t.test('workload: a held write re-reads its file every 10 s and says when it changed under it', async (t) => {
  const dir = tempDir(t, 'workload-');
  const id = await podman(...RUN, '-d', '-v', `${dir}:/data`, `oci-archive:${need('WORKLOAD')}`, 'write', '--hold');
  t.teardown(() => podman('rm', '-f', '-t', '0', id).catch(() => undefined));
  const checked = async (ok: boolean) => {
    for (let i = 0; i < 300; i++) {
      const found = jsonLines(await podman('logs', id)).find((r) => r.mode === 'checked' && r.ok === ok);
      if (found) return found;
      await sleep(100);
    }
    throw new Error(`no checked report with ok=${String(ok)}`);
  };
  t.match(await checked(true), { ok: true, at: /^\d{4}-/ });
  fs.writeFileSync(path.join(dir, 'data.bin'), 'not what was written');
  t.match(await checked(false), { ok: false, error: /now has 20 bytes/ });
  t.equal(await podman('inspect', '--format', '{{.State.Running}}', id), 'true', 'it keeps running: the test decides');
});

// The kubelet's side of plugin registration (pkg/apis/pluginregistration/v1 of k8s.io/kubelet):
// what its plugin watcher calls on a socket that appears in plugins_registry.
const registrationApi = protoLoader.fromJSON({
  nested: {
    pluginregistration: {
      nested: {
        PluginInfo: {
          fields: {
            type: { type: 'string', id: 1 },
            name: { type: 'string', id: 2 },
            endpoint: { type: 'string', id: 3 },
            supportedVersions: { rule: 'repeated', type: 'string', id: 4 },
          },
        },
        RegistrationStatus: {
          fields: { pluginRegistered: { type: 'bool', id: 1 }, error: { type: 'string', id: 2 } },
        },
        RegistrationStatusResponse: { fields: {} },
        InfoRequest: { fields: {} },
        Registration: {
          methods: {
            GetInfo: { requestType: 'InfoRequest', responseType: 'PluginInfo', comment: '' },
            NotifyRegistrationStatus: {
              requestType: 'RegistrationStatus',
              responseType: 'RegistrationStatusResponse',
              comment: '',
            },
          },
        },
      },
    },
  },
});
type Unary = (req: object, cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void) => void;
interface RegistrationClient extends grpc.Client {
  GetInfo: Unary;
  NotifyRegistrationStatus: Unary;
}
const Registration = (
  grpc.loadPackageDefinition(registrationApi) as unknown as {
    pluginregistration: { Registration: new (addr: string, creds: grpc.ChannelCredentials) => RegistrationClient };
  }
).pluginregistration.Registration;
const call = (c: RegistrationClient, m: 'GetInfo' | 'NotifyRegistrationStatus', req: object) =>
  new Promise<Record<string, unknown>>((resolve, reject) => {
    c[m](req, (err, res) => (err ? reject(err) : resolve(res)));
  });

async function healthz(port: number): Promise<{ status: number; body: string }> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`);
    return { status: r.status, body: await r.text() };
  } catch {
    return { status: 0, body: 'not listening' };
  }
}

t.test('registrar: waits for the driver, registers it as the kubelet expects, exits as upstream does', async (t) => {
  const dir = tempDir(t, 'registrar-');
  const reg = path.join(dir, 'plugins_registry');
  fs.mkdirSync(reg);
  const driverSock = path.join(dir, 'nfs.sock');
  const kubeletPath = '/var/lib/kubelet/plugins/nfs.csi.k8s.io/csi.sock';
  const regSock = path.join(reg, 'nfs.csi.k8s.io-reg.sock');
  // A stale socket file of an earlier run is replaced.
  fs.writeFileSync(regSock, '');
  fs.rmSync(regSock);
  const port = await freePort();
  const out: string[] = [];
  const registrar = spawnGuarded(
    need('REGISTRAR_BIN'),
    [
      `--csi-address=${driverSock}`,
      `--kubelet-registration-path=${kubeletPath}`,
      `--plugin-registration-path=${reg}`,
      `--http-endpoint=127.0.0.1:${port}`,
      '--v=2',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  registrar.stdout?.on('data', (d: Buffer) => out.push(d.toString()));
  registrar.stderr?.on('data', (d: Buffer) => out.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => registrar.on('exit', (code) => resolve(code)));
  t.teardown(() => void registrar.kill('SIGKILL'));

  // The driver starts after the registrar, as a node plugin container may.
  await sleep(1500);
  t.notOk(fs.existsSync(regSock), 'no registration socket before the driver answers');
  const driver = spawnProgram(t, [
    '--mode',
    'node',
    ...nodeIdentityArgs(),
    ...socketEndpointArgs(path.join(dir, 'pve.sock'), driverSock),
    '--metrics-address',
    '127.0.0.1:0',
  ]);
  await driver.ready();
  for (let i = 0; i < 100 && !fs.existsSync(regSock); i++) await sleep(100);
  t.ok(fs.statSync(regSock).isSocket(), `${regSock} is a socket: ${out.join('')}`);
  t.equal(fs.statSync(regSock).mode & 0o777, 0o700, 'created with umask 077');
  t.same(await healthz(port), { status: 200, body: 'ok' });

  const kubelet = new Registration(`unix://${regSock}`, grpc.credentials.createInsecure());
  t.teardown(() => kubelet.close());
  t.same(await call(kubelet, 'GetInfo', {}), {
    type: 'CSIPlugin',
    name: 'nfs.csi.k8s.io',
    endpoint: kubeletPath,
    supportedVersions: ['1.0.0'],
  });
  t.same(await call(kubelet, 'NotifyRegistrationStatus', { pluginRegistered: true }), {});
  t.equal(registrar.exitCode, null, 'still serving after a registration');

  // A refused registration ends the container, so it restarts and registers again.
  await call(kubelet, 'NotifyRegistrationStatus', { pluginRegistered: false, error: 'version 1.0.0 refused' }).catch(
    () => undefined,
  );
  t.equal(await exited, 1, 'exit 1 on a refused registration');
  t.match(out.join(''), /refused the registration of nfs\.csi\.k8s\.io: version 1\.0\.0 refused/);
  t.equal((await healthz(port)).status, 0, 'its /healthz is gone with it');
});

t.test('registrar: SIGTERM removes the registration socket and exits 0; /healthz 404 without it', async (t) => {
  const dir = tempDir(t, 'registrar-');
  const driverSock = path.join(dir, 'nfs.sock');
  const driver = spawnProgram(t, [
    '--mode',
    'node',
    ...nodeIdentityArgs(),
    ...socketEndpointArgs(path.join(dir, 'pve.sock'), driverSock),
    '--metrics-address',
    '127.0.0.1:0',
  ]);
  await driver.ready();
  const port = await freePort();
  const registrar = spawnGuarded(
    need('REGISTRAR_BIN'),
    [
      `--csi-address=${driverSock}`,
      '--kubelet-registration-path=/k/csi.sock',
      `--plugin-registration-path=${dir}`,
      `--http-endpoint=127.0.0.1:${port}`,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise<number | null>((resolve) => registrar.on('exit', (code) => resolve(code)));
  t.teardown(() => void registrar.kill('SIGKILL'));
  const regSock = path.join(dir, 'nfs.csi.k8s.io-reg.sock');
  let h = await healthz(port);
  for (let i = 0; i < 100 && h.status !== 200; i++) h = (await sleep(100), await healthz(port));
  t.same(h, { status: 200, body: 'ok' });
  // The socket removed behind its back: /healthz says so (the kubelet's liveness probe restarts it).
  fs.renameSync(regSock, `${regSock}.moved`);
  t.same(await healthz(port), { status: 404, body: 'registration socket does not exist' });
  fs.renameSync(`${regSock}.moved`, regSock);
  registrar.kill('SIGTERM');
  t.equal(await exited, 0);
  t.notOk(fs.existsSync(regSock), 'registration socket removed');
  t.equal(
    execFileSync(need('REGISTRAR_BIN'), ['--kubelet-registration-path=/x', '--mode=kubelet-registration-probe'], {
      encoding: 'utf8',
    }),
    '',
    'probe mode exits 0 at once',
  );
});
