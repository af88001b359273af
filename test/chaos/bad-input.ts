// Scenario 5, bad input: a table of hostile requests for every RPC of both drivers, sent to the
// real program (controller and node of both drivers in one process) that runs in a mount
// namespace of its own, so a node call that acts on "/" or outside the kubelet directory harms
// only that namespace, and is seen. Inside it, before the program starts: a tmpfs outside the
// kubelet directory, an unrelated tmpfs at a pod path inside it, a file holding data at another
// pod path, and a symlink from a pod path to the outside. Each row lists the answers it allows;
// afterwards the program must still be alive and ready, the namespace's mount table unchanged,
// every planted file intact, the Proxmox VMs' configs unchanged and nothing new on the export.
import fs from 'node:fs';
import path from 'node:path';
import { auditProxmox, baseline, type SimState } from './audit.js';
import { GiB, SINGLE_WRITER, topology, type ChaosEnv } from './env.js';
import { Program, programKnows } from './program.js';
import { CsiCaller, Recorder, field, volumeIdOf } from './rpc.js';
import { sharedGanesha, type NfsShared } from './nfs.js';
import { CODES, inputRows, type Driver } from './input-rows.js';
import { nodeIdentityArgs, socketEndpointArgs } from '../harness/backends.js';

const { IA, UNIMPL } = CODES;

export async function badInput(env: ChaosEnv, shared: NfsShared): Promise<Recorder> {
  const rec = new Recorder('5 bad input, every RPC (own mount ns)');
  const g = await sharedGanesha(shared);
  const { admin } = env;
  await admin.reset();
  const base = path.join(env.runDir, 'input');
  const K = path.join(base, 'kubelet');
  const OUT = path.join(base, 'outside');
  const foreign = path.join(K, 'pods/p1/volumes/kubernetes.io~csi/foreign/mount');
  const plain = path.join(K, 'pods/p2/volumes/kubernetes.io~csi/plain/mount');
  const link = path.join(K, 'pods/p3/volumes/kubernetes.io~csi/link/mount');
  const stagingForeign = path.join(K, 'plugins/kubernetes.io/csi/csi.proxmox.sinextra.dev/foreign/globalmount');
  const devices = path.join(base, 'devices');
  for (const d of [OUT, foreign, path.dirname(plain), path.dirname(link), stagingForeign, devices])
    fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(plain, "user data that is not the driver's\n");
  fs.symlinkSync(OUT, link);
  const setup = [
    `mount -t tmpfs chaos-outside '${OUT}'`,
    `echo keep > '${OUT}/data'`,
    `mount -t tmpfs chaos-foreign '${foreign}'`,
    `echo keep > '${foreign}/data'`,
    `mount -t tmpfs chaos-foreign-staging '${stagingForeign}'`,
    `echo keep > '${stagingForeign}/data'`,
  ].join('\n');
  const pveSock = path.join(base, 'pve.sock');
  const nfsSock = path.join(base, 'nfs.sock');
  const kubeletFlag = programKnows('--kubelet-dir') ? ['--kubelet-dir', K] : [];
  if (!kubeletFlag.length)
    rec.violate(
      'the program has no --kubelet-dir flag: node calls cannot be confined to a kubelet directory (docs/design.md#node-paths)',
    );
  const prog = new Program({
    name: 'input-all',
    runDir: env.runDir,
    namespace: { setup },
    args: [
      '--mode',
      'all',
      ...socketEndpointArgs(pveSock, nfsSock),
      '--proxmox-config',
      env.proxmoxConfig,
      ...nodeIdentityArgs(),
      '--device-dir',
      devices,
      '--nfs-port',
      String(g.nfsPort),
      '--nfs-mount-port',
      String(g.mountPort),
      '--nfs-mount-timeout',
      '5s',
      '--nfs-call-timeout',
      '3s',
      ...kubeletFlag,
    ],
  });
  await prog.start();
  const pid = prog.pid;
  const mountTable = () =>
    fs
      .readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ').slice(4, 5).join(' '))
      .sort();
  const before = mountTable();
  const csi: Record<Driver, CsiCaller> = {
    proxmox: new CsiCaller(`unix://${pveSock}`, rec),
    nfs: new CsiCaller(`unix://${nfsSock}`, rec),
  };

  // Real volumes for rows that need one that exists.
  const talos = path.join(g.exportDir, 'talos');
  fs.mkdirSync(path.join(talos, 'sentinel'), { recursive: true });
  fs.writeFileSync(path.join(talos, 'sentinel', 'keep'), 'keep\n');
  const pve = await csi.proxmox.op('controller', 'CreateVolume', {
    name: 'pvc-chaos-input',
    parameters: { storage: 'local-lvm' },
    volumeCapabilities: [SINGLE_WRITER],
    capacityRange: { requiredBytes: String(GiB) },
    accessibilityRequirements: topology('hyper1'),
  });
  const nfsParams = { server: g.server, share: `${g.share}/talos` };
  const nfsVol = await csi.nfs.op('controller', 'CreateVolume', {
    name: 'pvc-chaos-input',
    parameters: nfsParams,
    volumeCapabilities: [SINGLE_WRITER],
  });
  if (pve.code !== 'OK' || nfsVol.code !== 'OK') rec.violate(`setup: CreateVolume answered ${pve.code}/${nfsVol.code}`);
  const pveId = pve.code === 'OK' ? volumeIdOf(pve) : 'homelab/hyper1/local-lvm/vm-9999-pvc-chaos-input';
  const nfsId = nfsVol.code === 'OK' ? volumeIdOf(nfsVol) : '127.0.0.1#/volume1/k8s-volumes/talos#pvc-chaos-input##';
  const baseState = baseline((await admin.state()) as SimState);
  const exportBefore = fs.readdirSync(talos).sort();

  const rows = inputRows({ K, OUT, foreign, plain, link, stagingForeign, g, nfsParams, pveId, nfsId });

  for (const r of rows) {
    if (r.allow.includes(UNIMPL) && !r.allow.includes(IA)) r.allow.push(IA);
    rec.ops++;
    // Refusing bad input takes no backend work: 5 s is plenty, and keeps a hanging row cheap.
    const a = await csi[r.driver].once(r.svc, r.method, r.req, { deadlineMs: 5_000 });
    if (!r.allow.includes(a.code))
      rec.violate(
        `${r.driver} ${r.method} (${r.label}): ${a.code} ${a.message.slice(0, 160).replace(/\s+/g, ' ')} — allowed: ${r.allow.join(', ')}`,
      );
    // Whatever a hostile create made goes again (a leak check follows).
    if (a.code === 'OK' && r.method === 'CreateVolume')
      await csi[r.driver].op(
        'controller',
        'DeleteVolume',
        { volumeId: volumeIdOf(a) },
        { until: 'ok', budgetMs: 30_000 },
      );
    if (!prog.alive()) {
      rec.violate(`the program died after ${r.driver} ${r.method} (${r.label})`);
      break;
    }
  }

  // The invariants the rows must not have broken.
  if (prog.alive()) {
    for (const d of ['proxmox', 'nfs'] as Driver[]) {
      const p = await csi[d].once('identity', 'Probe', {});
      const ready = field(p.res, 'ready', 'value');
      if (p.code !== 'OK' || ready === false)
        rec.violate(`${d}: Probe after the table: ${p.code} ready=${String(ready)}`);
    }
    const after = mountTable();
    const gone = before.filter((m) => !after.includes(m));
    const added = after.filter((m) => !before.includes(m));
    if (gone.length)
      rec.violate(
        `mounts gone from the program's namespace: ${gone.slice(0, 8).join(', ')}${gone.length > 8 ? ` … (${gone.length})` : ''}`,
      );
    if (added.length) rec.violate(`mounts added in the program's namespace: ${added.join(', ')}`);
    if (added.length) rec.leaks.mount = added.length;
    if (gone.length) rec.leaks['mount removed'] = gone.length;
    for (const f of [`${OUT}/data`, `${foreign}/data`, `${stagingForeign}/data`]) {
      if (!fs.existsSync(`/proc/${pid}/root${f}`))
        rec.violate(`planted file ${f} is gone (inside the program's namespace)`);
    }
  }
  if (!fs.existsSync(plain) || fs.readFileSync(plain, 'utf8') === '')
    rec.violate(`the file holding data at ${plain} was deleted or emptied`);
  if (!fs.lstatSync(link, { throwIfNoEntry: false })?.isSymbolicLink())
    rec.violate(`the symlink at ${link} was removed`);
  if (!fs.existsSync(path.join(talos, 'sentinel', 'keep'))) rec.violate("the export's sentinel directory was deleted");
  const exportAfter = fs.readdirSync(talos).sort();
  const newDirs = exportAfter.filter((e) => !exportBefore.includes(e));
  if (newDirs.length) {
    rec.leaks.directory = newDirs.length;
    rec.violate(`new entries on the export: ${newDirs.join(', ')}`);
  }

  await csi.proxmox.op('controller', 'DeleteVolume', { volumeId: pveId }, { until: 'ok', budgetMs: 30_000 });
  await csi.nfs.op('controller', 'DeleteVolume', { volumeId: nfsId }, { until: 'ok', budgetMs: 30_000 });
  for (const c of Object.values(csi)) c.close();
  await prog.stop();
  await auditProxmox(admin, rec, { base: baseState });
  fs.rmSync(path.join(talos, 'sentinel'), { recursive: true, force: true });
  return rec;
}
