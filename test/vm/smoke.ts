// Smoke test of the VM tier (test/vm/vm.sh smoke): boots the guest and checks, from the host,
// (a) a forwarded port reaches a guest process, (b) the exec channel and csi-sanity path
// helpers, (c) QMP hot-plug of a disk with a PVC-ID WWN as Proxmox does it, found by WWN,
// formatted, mounted, grown online with block_resize + resize2fs, unplugged, (d) the guest
// mounts its own NFS export (v4.2 soft, v3 nolock) and writes, (e) the host reaches that NFS
// server in user space through the forwarded ports, (f) nothing is left behind. Prints the
// time of each phase; exits non-zero on the first failure.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { repoRoot, startGuest, type Guest } from './guest.js';
import { prepareGuest } from './prepare.js';
import { QmpHotplug } from '../../sim/backend/qmp.js';

const run = promisify(execFile);
const ECHO_PORT = 7000;
const GiB = 1024 ** 3;
const WWN = '5056432d49443031'; // "PVC-ID01": slot 1
const phases: [string, number][] = [];
const log = (l: string) => process.stderr.write(`${l}\n`);

function check(ok: unknown, what: string): asserts ok {
  if (!ok) throw new Error(`check failed: ${what}`);
}

async function phase<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const t = Date.now();
  try {
    return await fn();
  } finally {
    const s = (Date.now() - t) / 1000;
    phases.push([name, s]);
    log(`smoke: ${name}: ${s.toFixed(1)}s`);
  }
}

async function until(what: string, timeoutMs: number, probe: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

function echoRoundTrip(port: number, payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => s.destroy(new Error('echo timed out')), 15_000);
    s.setEncoding('utf8');
    s.on('connect', () => s.write(payload));
    s.on('data', (d: string) => {
      got += d;
      if (got.length >= payload.length) s.end();
    });
    s.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}

async function cli(g: Guest, script: string, args: string[]): Promise<{ code: number; out: string }> {
  const file = path.join(repoRoot, 'test/vm', script);
  try {
    const r = await run(file, args, { env: { ...process.env, VM_QGA_SOCKET: g.qgaSocket }, timeout: 60_000 });
    return { code: 0, out: r.stdout };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    if (typeof err.code !== 'number') throw e;
    return { code: err.code, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

async function execChannel(g: Guest): Promise<void> {
  const uname = await cli(g, 'guest-exec.sh', ['uname', '-r']);
  check(uname.code === 0 && uname.out.trim().length > 0, `guest-exec uname -r: ${JSON.stringify(uname)}`);
  const seven = await cli(g, 'guest-exec.sh', ['sh', '-c', 'echo out; echo err >&2; exit 7']);
  check(
    seven.code === 7 && seven.out.includes('out') && seven.out.includes('err'),
    `exit code relay: ${JSON.stringify(seven)}`,
  );
  const dir = `/tmp/csi-smoke-${randomBytes(4).toString('hex')}/mount`;
  const made = await cli(g, 'sanity/create-path.sh', [dir]);
  check(made.code === 0 && made.out.trim() === dir, `create-path printed ${JSON.stringify(made)}`);
  const kind = async (p: string) => (await cli(g, 'sanity/check-path.sh', [p])).out.trim();
  check((await kind(dir)) === 'directory', 'check-path sees the created directory');
  await g.sh(`touch ${dir}/f`);
  check((await kind(`${dir}/f`)) === 'file', 'check-path sees a file');
  check((await kind('/dev/null')) === 'other', 'check-path calls a device other');
  const removed = await cli(g, 'sanity/remove-path.sh', [path.dirname(dir)]);
  check(removed.code === 0, `remove-path: ${JSON.stringify(removed)}`);
  check((await kind(dir)) === 'not_found', 'check-path after remove-path');
}

async function hotplug(g: Guest): Promise<void> {
  const file = path.join(g.dir, 'vm-9999-pvc-smoke.raw');
  fs.writeFileSync(file, '');
  fs.truncateSync(file, GiB);
  // The simulator's own QMP hot-plug (qemu-server's command sequence) against the real QEMU: what
  // the VM tier relies on is checked here against what the guest's kernel sees.
  const vm = { vmid: 9999, name: 'smoke', node: 'smoke' };
  const hp = new QmpHotplug({ [vm.vmid]: g.qmpSocket }, 30_000);
  const findWwid = `grep -l '^naa.${WWN}$' /sys/bus/scsi/devices/*/wwid 2>/dev/null || true`;
  try {
    await hp.plug(vm, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: file, wwn: `0x${WWN}` });
    await until('the disk to appear in the guest', 30_000, async () => (await g.sh(findWwid)).trim() !== '');
    const dev = await g.sh(
      `d=$(dirname "$(${findWwid})"); cat "$d/vendor"; ls "$d/block"; ` +
        `for i in $(seq 50); do [ -e /dev/disk/by-id/wwn-0x${WWN} ] && break; sleep 0.1; done; ` +
        `readlink /dev/disk/by-id/wwn-0x${WWN}`,
    );
    const [vendor, blk, link] = dev
      .trim()
      .split('\n')
      .map((s) => s.trim());
    check(vendor === 'QEMU', `vendor ${vendor}`);
    check(blk && link === `../../${blk}`, `by-id link ${link} for ${blk}`);
    // What the node plugin will do with it: format, mount, write, then grow online.
    const sizeKb = `df -k --output=size /mnt/disk | tail -1`;
    const before = Number(
      await g.sh(`set -e; mkfs.ext4 -q /dev/${blk}; mkdir -p /mnt/disk; mount /dev/${blk} /mnt/disk
        echo data > /mnt/disk/f; ${sizeKb}`),
    );
    await hp.resize(vm, 'scsi1', 2 * GiB);
    await until(
      'the guest to see the new capacity',
      30_000,
      async () => Number(await g.sh(`cat /sys/block/${blk}/size`)) === (2 * GiB) / 512,
    );
    const after = Number(await g.sh(`set -e; resize2fs -f /dev/${blk} >/dev/null 2>&1; ${sizeKb}`));
    check(after > before * 1.8, `online resize grew the filesystem (${before} KiB -> ${after} KiB)`);
    check((await g.sh('cat /mnt/disk/f; umount /mnt/disk')).trim() === 'data', 'data survives the resize');
    // Throws when QEMU does not report DEVICE_DELETED within the 30 s given above.
    await hp.unplug(vm, 'scsi1');
    await until(
      'the disk to leave the guest',
      30_000,
      async () => (await g.sh(`${findWwid}; ls /dev/disk/by-id/ 2>/dev/null | grep ${WWN} || true`)).trim() === '',
    );
  } finally {
    await hp.close();
  }
}

async function guestNfs(g: Guest): Promise<string> {
  const name = `smoke-${randomBytes(4).toString('hex')}`;
  await g.sh(`set -e
    mkdir -p /mnt/v4 /mnt/v3
    mount -t nfs -o vers=4.2,soft,timeo=30,retrans=3 127.0.0.1:/volume1/k8s-volumes/talos /mnt/v4
    mount -t nfs -o vers=3,nolock 127.0.0.1:/volume1/k8s-volumes/talos /mnt/v3
    trap 'umount /mnt/v4 /mnt/v3' EXIT
    echo v4 > /mnt/v4/${name}.v4
    echo v3 > /mnt/v3/${name}.v3
    [ "$(cat /mnt/v3/${name}.v4)" = v4 ] && [ "$(cat /mnt/v4/${name}.v3)" = v3 ]
    [ -f /srv/nas/volume1/k8s-volumes/talos/${name}.v4 ]`);
  return name;
}

async function hostNfs(g: Guest, name: string): Promise<void> {
  const v3 = `nfs://127.0.0.1/volume1/k8s-volumes/talos?nfsport=${g.nfsPort}&mountport=${g.nfsMountPort}`;
  const v4 = `nfs://127.0.0.1/volume1/k8s-volumes/talos?version=4&nfsport=${g.nfsPort}`;
  for (const url of [v3, v4]) {
    const { stdout } = await run('nfs-ls', [url], { timeout: 30_000 });
    check(stdout.includes(`${name}.v4`) && stdout.includes(`${name}.v3`), `nfs-ls ${url} lists the files:\n${stdout}`);
  }
}

async function main(): Promise<void> {
  const t0 = Date.now();
  await phase('prepare', () => prepareGuest(log));
  const payload = randomBytes(16).toString('hex');
  const g = await phase('boot', () =>
    startGuest({
      forwards: [{ guestPort: ECHO_PORT }],
      run: `exec node -e 'require("net").createServer((s) => s.pipe(s)).listen(${ECHO_PORT}, "127.0.0.1")'\n`,
      logDir: path.join(repoRoot, '.run/vm-smoke'),
    }),
  );
  let qemuPid = 0;
  try {
    qemuPid = Number(fs.readFileSync(path.join(g.dir, 'qemu.pid'), 'utf8').trim());
    await phase('a: forwarded port', async () => {
      const got = await echoRoundTrip(g.hostPort(ECHO_PORT), payload);
      check(got === payload, `echo returned ${JSON.stringify(got)}`);
    });
    await phase('b: exec channel + sanity path helpers', () => execChannel(g));
    await phase('c: QMP hot-plug, ext4, online resize, unplug', () => hotplug(g));
    const name = await phase('d: guest NFS mounts (v4.2 soft, v3 nolock)', () => guestNfs(g));
    await phase('e: host user-space NFS through forwards (v3, v4)', () => hostNfs(g, name));
  } finally {
    await phase('stop', () => g.stop());
  }
  await phase('f: nothing left behind', async () => {
    check(!fs.existsSync(g.dir), `${g.dir} removed`);
    let alive = false;
    try {
      process.kill(qemuPid, 0);
      alive = true;
    } catch {
      // ESRCH: gone, as it should be.
    }
    check(qemuPid > 0 && !alive, `QEMU pid ${qemuPid} gone`);
  });
  const total = (Date.now() - t0) / 1000;
  log(
    `smoke: PASS in ${total.toFixed(1)}s (${phases.map(([n, s]) => `${n.split(':')[0]} ${s.toFixed(1)}s`).join(', ')})`,
  );
}

main().catch((e: unknown) => {
  log(`smoke: FAIL: ${e instanceof Error ? e.message : String(e)}`);
  process.exitCode = 1;
});
