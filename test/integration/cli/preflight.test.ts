// `pve-nfs-csi preflight` against the Proxmox simulator and a real ganesha: one healthy setup and
// several broken ones, each reported by name, with the exit code and --json of the real program.
import { present } from '../../helpers/present.js';
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { parse as parseYaml, stringify } from 'yaml';
import { DEFAULT_CONFIG_PATH, startSimulator } from '../../../sim/index.js';
import { runPreflight } from '../../../src/cli/preflight.js';
import type { CheckResult, PreflightInput } from '../../../src/cli/preflight-checks.js';
import { parseProxmoxConfig } from '../../../src/config/proxmox-file.js';
import { startGanesha } from '../nfs/ganesha.js';
import { freePort } from '../../helpers/free-port.js';

const AUDITOR = { id: 'auditor@pve!ro', secret: '11111111-2222-3333-4444-555555555555', role: 'PVEAuditor' };
const simConfig = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as {
  tokens: unknown[];
  nodes: { storages: unknown[] }[];
};
simConfig.tokens.push(AUDITOR);
// Storages of other types: ZFS and NFS are served; a directory that holds no disk images is not usable.
for (const n of simConfig.nodes)
  n.storages.push(
    { id: 'local-zfs', type: 'zfspool' },
    { id: 'nas', type: 'nfs' },
    { id: 'isos', type: 'dir', content: 'iso,vztmpl' },
  );
const [sim, g] = await Promise.all([
  startSimulator({ backend: 'none', config: simConfig, faults: { authFailureDelayMs: 0 } }),
  startGanesha(),
]);
t.teardown(async () => {
  await sim.close();
  await g.stop();
});
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'preflight-'));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));

const configText = (creds: string) =>
  `clusters:\n  - url: ${sim.url}\n    ca_file: ${sim.caFile}\n    region: homelab\n${creds}`;
const TOKEN = `    token_id: "${sim.tokenId}"\n    token_secret: "${sim.tokenSecret}"\n`;
const SHARE = `${g.share}/talos`;
const legacyPv = {
  metadata: { name: 'pvc-legacy-1' },
  spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `127.0.0.1#${SHARE.slice(1)}#media/config#pvc-legacy-1` } },
};
const newPv = {
  metadata: { name: 'pvc-new-1' },
  spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `127.0.0.1#${SHARE.slice(1)}#media/db#pvc-new-1#archive` } },
};

function input(over: Partial<PreflightInput> & { creds?: string } = {}): PreflightInput {
  const { creds, ...rest } = over;
  return {
    proxmox: parseProxmoxConfig(configText(creds ?? TOKEN), 'config.yaml'),
    classes: [
      {
        name: 'proxmox-local',
        driver: 'proxmox',
        parameters: {
          storage: 'local-lvm',
          ssd: 'true',
          backup: 'true',
          cache: 'writethrough',
          'csi.storage.k8s.io/fstype': 'ext4',
        },
      },
      {
        name: 'syno-nfs-csi',
        driver: 'nfs',
        parameters: {
          server: '127.0.0.1',
          share: SHARE,
          subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
          onDelete: 'archive',
        },
      },
    ],
    defaultOnDelete: 'delete',
    previousDefaultOnDelete: 'delete',
    pvs: [legacyPv, newPv],
    nfsPort: g.nfsPort,
    nfsMountPort: g.mountPort,
    timeoutMs: 3000,
    ...rest,
  };
}
const byName = (rs: CheckResult[], name: string) => rs.find((r) => r.name === name);
const failures = (rs: CheckResult[]) => rs.filter((r) => r.status === 'fail').map((r) => r.name);

t.test('healthy: every check passes', async (t) => {
  const rs = await runPreflight(input(), AbortSignal.timeout(30_000));
  t.same(failures(rs), [], JSON.stringify(rs.filter((r) => r.status === 'fail')));
  for (const n of [
    'storageclass/proxmox-local',
    'storageclass/syno-nfs-csi',
    'proxmox/homelab/api',
    'proxmox/homelab/privileges',
    'proxmox/homelab/storage/local-lvm',
    `nfs/127.0.0.1:${SHARE}/export`,
    `nfs/127.0.0.1:${SHARE}/write`,
    'swap/nfs-legacy-ondelete',
  ]) {
    t.equal(byName(rs, n)?.status, 'pass', n);
  }
  t.match(
    byName(rs, 'swap/nfs-legacy-ondelete')?.message,
    /1 NFS PersistentVolume\(s\) .*pvc-legacy-1.* will be deleted on delete, as before/,
  );
  // the CSI role alone cannot run `move`: said as information, not as a failure
  t.match(byName(rs, 'proxmox/homelab/move-privileges'), {
    status: 'info',
    message:
      /pve-nfs-csi move \(optional\) would need VM\.Allocate on \/vms\/9999 \(create and destroy the helper VM\); VM\.Config\.Options on \/vms\/9999 \(give the helper VM its name and description at creation\); VM\.Migrate on \/vms\/9999/,
  });
  // snapshots create a copy VM with a name and a description: VM.Config.Options is named
  t.match(byName(rs, 'proxmox/homelab/snapshot-privileges'), {
    status: 'info',
    message: /VM\.Config\.Options on \/vms \(create the copy VM with the name and description that mark it as ours\)/,
  });
  // the CSI role is all report and report --fix need
  t.match(byName(rs, 'proxmox/homelab/report-privileges'), {
    status: 'info',
    message: /may run pve-nfs-csi report and report --fix/,
  });
  t.equal(
    fs.readdirSync(path.join(g.exportDir)).filter((f) => f.startsWith('.pve-nfs-csi-preflight')).length,
    0,
    'the write probe left nothing behind',
  );
  const ticket = await runPreflight(
    input({ creds: `    username: ${sim.username}\n    password: ${sim.password}\n` }),
    AbortSignal.timeout(30_000),
  );
  t.same(failures(ticket), [], 'ticket login too');
});

t.test('bad token privileges: missing ones named', async (t) => {
  const rs = await runPreflight(
    input({ creds: `    token_id: "${AUDITOR.id}"\n    token_secret: "${AUDITOR.secret}"\n` }),
    AbortSignal.timeout(30_000),
  );
  t.same(failures(rs), ['proxmox/homelab/privileges']);
  t.match(
    byName(rs, 'proxmox/homelab/privileges')?.message,
    /token auditor@pve!ro lacks VM\.Config\.Disk, Datastore\.Allocate, Datastore\.AllocateSpace; grant it a role/,
  );
  // an auditor sees every VM but not the driver's disks (pve-storage hides images without
  // Datastore.Allocate or VM.Config.Disk on their owner), and may not fix anything
  t.match(byName(rs, 'proxmox/homelab/report-privileges'), {
    status: 'info',
    message:
      /report \(optional\) would need VM\.Config\.Disk on \/vms\/9999 .*; report --fix also Datastore\.Allocate on \/storage .*VM\.Config\.Disk on \/vms /,
  });
  const wrong = await runPreflight(
    input({ creds: `    token_id: "${sim.tokenId}"\n    token_secret: "00000000-0000-0000-0000-000000000000"\n` }),
    AbortSignal.timeout(30_000),
  );
  t.match(byName(wrong, 'proxmox/homelab/api'), {
    status: 'fail',
    message: /authentication failed \(invalid token value!\)/,
  });
});

t.test('unreachable NAS and a missing export', async (t) => {
  const closed = await freePort();
  const rs = await runPreflight(input({ nfsPort: closed, nfsMountPort: closed }), AbortSignal.timeout(30_000));
  t.same(failures(rs), [`nfs/127.0.0.1:${SHARE}/export`]);
  t.match(byName(rs, `nfs/127.0.0.1:${SHARE}/export`)?.message, /127\.0\.0\.1/);
  const other = input();
  present(other.classes[1], 'the NFS class').parameters.share = '/volume9/nothing';
  const missing = await runPreflight(other, AbortSignal.timeout(30_000));
  t.same(failures(missing), ['nfs/127.0.0.1:/volume9/nothing/export']);
});

t.test('retain-default legacy handles: csi-driver-nfs kept them, the new default would delete them', async (t) => {
  const rs = await runPreflight(input({ previousDefaultOnDelete: 'retain' }), AbortSignal.timeout(30_000));
  t.same(failures(rs), ['swap/nfs-legacy-ondelete']);
  t.match(
    byName(rs, 'swap/nfs-legacy-ondelete')?.message,
    /1 NFS PersistentVolume\(s\) without onDelete in their handle \(pvc-legacy-1\) were retained by csi-driver-nfs but would be deleted: set controller\.defaultOnDeletePolicy=retain/,
  );
  const fixed = await runPreflight(
    input({ previousDefaultOnDelete: 'retain', defaultOnDelete: 'retain' }),
    AbortSignal.timeout(30_000),
  );
  t.same(failures(fixed), [], 'with the same default the swap is safe');
});

t.test("StorageClass parameters and storages are checked by the drivers' own rules", async (t) => {
  const i = input();
  i.classes.push({
    name: 'zfs-replicated',
    driver: 'proxmox',
    parameters: { storage: 'local-lvm', replicate: 'true' },
  });
  i.classes.push({ name: 'elsewhere', driver: 'proxmox', parameters: { storage: 'nvme-thin' } });
  for (const storage of ['local-zfs', 'nas', 'isos'])
    i.classes.push({ name: `on-${storage}`, driver: 'proxmox', parameters: { storage } });
  i.classes.push({
    name: 'nfs-typo',
    driver: 'nfs',
    parameters: { server: '127.0.0.1', share: SHARE, ondelet: 'retain' },
  });
  const rs = await runPreflight(i, AbortSignal.timeout(30_000));
  t.same(failures(rs).sort(), [
    'proxmox/homelab/storage/isos',
    'proxmox/homelab/storage/nvme-thin',
    'storageclass/nfs-typo',
    'storageclass/zfs-replicated',
  ]);
  t.match(byName(rs, 'proxmox/homelab/storage/isos')?.message, /does not hold disk images .*content: iso,vztmpl/);
  t.match(byName(rs, 'proxmox/homelab/storage/local-zfs'), { status: 'pass', message: /^zfspool \(ZFS\) on hyper1/ });
  t.match(byName(rs, 'proxmox/homelab/storage/nas'), { status: 'pass', message: /^nfs \(.*, shared\) on hyper1/ });
  t.match(byName(rs, 'storageclass/zfs-replicated')?.message, /replicate.*ZFS/);
  t.match(byName(rs, 'storageclass/nfs-typo')?.message, /ondelet/);
});

t.test('the program: preflight subcommand, files as input, exit codes and --json', async (t) => {
  const config = path.join(tmp, 'config.yaml');
  fs.writeFileSync(config, configText(TOKEN) + '    colour: blue\n');
  const values = path.join(tmp, 'values.yaml');
  fs.writeFileSync(
    values,
    stringify({
      controller: { defaultOnDeletePolicy: 'delete' },
      proxmox: {
        storageClassDefaults: { parameters: { 'csi.storage.k8s.io/fstype': 'ext4', backup: 'true' } },
        storageClasses: [{ name: 'proxmox-local', parameters: { storage: 'local-lvm' } }],
      },
      nfs: {
        storageClassDefaults: { parameters: { onDelete: 'archive' } },
        storageClasses: [
          { name: 'syno-nfs-csi', parameters: { server: '127.0.0.1', share: SHARE, uid: 1000, gid: 1000 } },
        ],
      },
    }),
  );
  const pvs = path.join(tmp, 'pvs.json');
  fs.writeFileSync(pvs, JSON.stringify({ items: [legacyPv, newPv] }));
  const run = (extra: string[]) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const c = spawn(
        process.execPath,
        [
          '--import=tsx',
          path.resolve('src/main.ts'),
          'preflight',
          '--config',
          config,
          '--values',
          values,
          '--pvs',
          pvs,
          '--nfs-port',
          String(g.nfsPort),
          '--nfs-mount-port',
          String(g.mountPort),
          ...extra,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let err = '';
      c.stdout.on('data', (d: Buffer) => (out += d.toString()));
      c.stderr.on('data', (d: Buffer) => (err += d.toString()));
      c.on('exit', (code) => resolve({ code, out, err }));
    });
  const [text, json, bad] = await Promise.all([
    run(['--previous-default-ondelete-policy', 'delete']),
    run(['--previous-default-ondelete-policy', 'retain', '--json']),
    run(['--previous-default-ondelete-policy', 'sometimes']),
  ]);
  t.equal(text.code, 0, text.out + text.err);
  t.match(text.out, /^PASS {2}storageclass\/proxmox-local: /m);
  t.match(
    text.out,
    /^WARN {2}proxmox\/config: .*clusters\[0\]\.colour is not a key/m,
    'config warnings are part of the report',
  );
  t.match(text.out, /preflight passed/);
  t.equal(json.code, 1);
  const doc = JSON.parse(json.out) as { ok: boolean; checks: CheckResult[] };
  t.equal(doc.ok, false);
  t.same(
    doc.checks.filter((c) => c.status === 'fail').map((c) => c.name),
    ['swap/nfs-legacy-ondelete'],
  );
  t.equal(bad.code, 2);
  t.match(bad.err, /--previous-default-ondelete-policy: "sometimes"/);
});
