import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../../src/config/load.js';
import { parseProxmoxConfig } from '../../../src/config/proxmox-file.js';
import { ConfigError } from '../../../src/config/errors.js';

const SECRET = '5f9c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';
const good = `clusters:\n  - url: https://pve.example:8006/api2/json\n    insecure: false\n    token_id: "kubernetes-csi@pve!csi"\n    token_secret: "${SECRET}"\n    region: homelab\n`;

t.test('upstream config format parses, with features.controllerVmID', async (t) => {
  const c = parseProxmoxConfig(good + 'features:\n  controllerVmID: 8888\n', 'c.yaml');
  t.equal(c.controllerVmId, 8888);
  t.strictSame(c.clusters[0], {
    url: 'https://pve.example:8006/api2/json',
    insecure: false,
    tokenId: 'kubernetes-csi@pve!csi',
    tokenSecret: SECRET,
    region: 'homelab',
  });
  t.equal(parseProxmoxConfig(good, 'c.yaml').controllerVmId, 9999, 'default 9999');
});

t.test('token_id_file / token_secret_file are read', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cfg-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true }));
  fs.writeFileSync(path.join(dir, 'id'), 'kubernetes-csi@pve!csi\n');
  fs.writeFileSync(path.join(dir, 'secret'), SECRET + '\n');
  const c = parseProxmoxConfig(
    `clusters:\n- url: https://h:8006/api2/json\n  token_id_file: ${dir}/id\n  token_secret_file: ${dir}/secret\n  region: r\n`,
    'c.yaml',
  );
  t.equal(c.clusters[0]?.tokenId, 'kubernetes-csi@pve!csi');
  t.equal(c.clusters[0]?.tokenSecret, SECRET);
});

t.test('each bad config names its key', async (t) => {
  const cases: [string, RegExp][] = [
    ['clusters: []', /clusters must be a non-empty list/],
    ['clusters:\n- url: https://h/\n  region: r\n', /clusters\[0\]: credentials are required: token_id/],
    [good.replace('region: homelab', 'region: ""'), /clusters\[0\]\.region is required/],
    [good.replace('insecure: false', 'insecure: maybe'), /clusters\[0\]\.insecure must be true or false/],
    [good.replace('https://pve.example:8006/api2/json', 'not a url'), /clusters\[0\]\.url/],
    [good.replace('kubernetes-csi@pve!csi', 'nobang'), /token_id must look like USER@REALM!TOKENID/],
    [good + 'features:\n  controllerVmID: 12\n', /features\.controllerVmID/],
    ['clusters: [', /not valid YAML/],
  ];
  for (const [text, re] of cases) t.throws(() => parseProxmoxConfig(text, 'c.yaml'), re, String(re));
});

t.test('flags and environment', async (t) => {
  const r = loadConfig(['--mode', 'node', '--nfs-endpoint', 'unix:///csi/nfs.sock'], {
    NODE_NAME: 'talos-w-1',
    CSI_ZONE: 'hyper1',
  });
  t.equal(r.kind, 'run');
  if (r.kind === 'run') {
    t.equal(r.config.node.nodeId, 'talos-w-1');
    t.equal(r.config.node.zone, 'hyper1');
    t.equal(r.config.drainTimeoutMs, 30_000);
    t.equal(r.config.nfsDefaultOnDelete, 'delete', "csi-driver-nfs's default");
    t.equal(r.config.node.maxVolumes, undefined, 'no volume limit of its own: the free SCSI slots');
  }
  const limited = loadConfig(['--mode', 'node', '--proxmox-endpoint', 'unix:///a', '--node-id', 'n'], {
    CSI_MAX_VOLUMES_PER_NODE: '8',
  });
  t.equal(limited.kind === 'run' && limited.config.node.maxVolumes, 8, 'CSI_MAX_VOLUMES_PER_NODE');
  const zero = loadConfig(
    ['--mode', 'node', '--proxmox-endpoint', 'unix:///a', '--node-id', 'n', '--max-volumes-per-node', '0'],
    {},
  );
  t.equal(zero.kind === 'run' && zero.config.node.maxVolumes, undefined, '0 = the free SCSI slots');
  const retain = loadConfig(['--mode', 'node', '--nfs-endpoint', 'unix:///a', '--node-id', 'n'], {
    NFS_DEFAULT_ONDELETE_POLICY: 'Retain',
  });
  t.equal(retain.kind === 'run' && retain.config.nfsDefaultOnDelete, 'retain', 'env, case-insensitive like upstream');
  const archive = loadConfig(
    ['--mode', 'node', '--nfs-endpoint', 'unix:///a', '--node-id', 'n', '--default-ondelete-policy', 'archive'],
    { NFS_DEFAULT_ONDELETE_POLICY: 'retain' },
  );
  t.equal(archive.kind === 'run' && archive.config.nfsDefaultOnDelete, 'archive', 'the flag wins');
  t.throws(
    () =>
      loadConfig(
        ['--mode', 'node', '--nfs-endpoint', 'unix:///a', '--node-id', 'n', '--default-ondelete-policy', 'retian'],
        {},
      ),
    /--default-ondelete-policy: "retian" must be delete, retain or archive/,
    'a typo is refused, not a silent delete',
  );
  const bad: [string[], RegExp][] = [
    [['--bogus'], /bogus/],
    [['--mode', 'both', '--nfs-endpoint', 'unix:///a'], /--mode/],
    [['--mode', 'node'], /no driver enabled/],
    [['--mode', 'node', '--nfs-endpoint', 'http://x'], /--nfs-endpoint/],
    [['--mode', 'controller', '--proxmox-endpoint', 'unix:///a'], /--proxmox-config is required/],
    [['--mode', 'node', '--nfs-endpoint', 'unix:///a'], /--node-id/],
    [['--mode', 'controller', '--nfs-endpoint', 'unix:///a', '--drain-timeout', 'soon'], /--drain-timeout/],
    [
      ['--mode', 'node', '--node-id', 'n', '--proxmox-endpoint', 'unix:///a', '--max-volumes-per-node=-1'],
      /"-1" must be a whole number/,
    ],
    [['--mode', 'node', '--node-id', 'n', '--proxmox-endpoint', 'unix:///a', '--max-volumes-per-node', '2.5'], /2\.5/],
    [
      ['--mode', 'controller', '--nfs-endpoint', 'unix:///a', '--proxmox-config', '/nonexistent.yaml'],
      /cannot read \/nonexistent.yaml/,
    ],
  ];
  for (const [argv, re] of bad)
    t.throws(() => loadConfig(argv, {}), { constructor: ConfigError, message: re }, argv.join(' '));
});
