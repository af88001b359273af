// The config Secret shapes proxmox-csi-plugin v0.19.1 accepts (its test/config files, its
// docs/config.md, its chart values, username/password) load here with upstream's meaning;
// unknown keys are warnings naming the key, never an exit.
import t from 'tap';
import { present } from '../../helpers/present.js';
import { parseProxmoxConfig } from '../../../src/config/proxmox-file.js';

const SECRET = '5f9c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f';

t.test('upstream test/config/cluster-config-2.yaml shape (capmox, two clusters)', async (t) => {
  const c = parseProxmoxConfig(
    `features:
  provider: capmox
clusters:
  - url: https://127.0.0.1:8006/api2/json
    insecure: false
    token_id: "user@pve!token-id"
    token_secret: "secret"
    region: cluster-1
  - url: https://127.0.0.2:8006/api2/json
    insecure: false
    token_id: "user@pve!token-id"
    token_secret: "secret"
    region: cluster-2
`,
    'c.yaml',
  );
  t.equal(c.provider, 'capmox');
  t.equal(c.controllerVmId, 9999);
  t.same(
    c.clusters.map((x) => x.region),
    ['cluster-1', 'cluster-2'],
  );
  t.same(c.warnings, []);
});

t.test(
  'docs/config.md spelling features.controllerVMID: accepted, ignored as upstream did, with a warning',
  async (t) => {
    const base = `clusters:\n  - url: https://pve:8006/api2/json\n    token_id: "kubernetes-csi@pve!csi"\n    token_secret: "${SECRET}"\n    region: Region-1\n`;
    const same = parseProxmoxConfig(`features:\n  provider: default\n  controllerVMID: 9999\n${base}`, 'c.yaml');
    t.equal(same.controllerVmId, 9999);
    t.same(same.warnings, [], 'the documented default: nothing to warn about');
    const other = parseProxmoxConfig(`features:\n  controllerVMID: 4242\n${base}`, 'c.yaml');
    t.equal(other.controllerVmId, 9999, 'upstream ignored the key: disks stay vm-9999-…');
    t.match(other.warnings?.[0], /features\.controllerVMID \(4242\) is ignored.*controllerVmID/);
    const both = parseProxmoxConfig(`features:\n  controllerVmID: 5000\n  controllerVMID: 4242\n${base}`, 'c.yaml');
    t.equal(both.controllerVmId, 5000, 'controllerVmID is what upstream read');
    t.throws(
      () => parseProxmoxConfig(`features:\n  controllerVmID: 100\n${base}`, 'c.yaml'),
      /above 100/,
      'upstream refuses <= 100',
    );
  },
);

t.test('username/password (ticket login) loads; mixed or half credentials are refused as upstream does', async (t) => {
  const c = parseProxmoxConfig(
    `clusters:\n  - url: https://pve:8006/api2/json\n    insecure: true\n    username: root@pam\n    password: "s3cret"\n    region: homelab\n`,
    'c.yaml',
  );
  t.strictSame(c.clusters[0], {
    url: 'https://pve:8006/api2/json',
    insecure: true,
    region: 'homelab',
    username: 'root@pam',
    password: 's3cret',
  });
  const numeric = parseProxmoxConfig(
    `clusters:\n  - url: https://pve:8006/api2/json\n    username: csi@pve\n    password: 12345\n    region: homelab\n`,
    'c.yaml',
  );
  t.equal(numeric.clusters[0]?.password, '12345', 'an unquoted numeric password is still a password');
  const bad: [string, RegExp][] = [
    [
      `    username: root@pam\n    password: x\n    token_id: "a@pve!b"\n    token_secret: "${SECRET}"\n`,
      /either token_id\/token_secret or username\/password/,
    ],
    ['    username: root@pam\n', /credentials are required/],
    ['    username: root\n    password: x\n', /username must look like USER@REALM/],
    [
      `    token_id: "a@pve!b"\n    token_id_file: /x\n    token_secret: "${SECRET}"\n`,
      /token_id or token_id_file, not both/,
    ],
  ];
  for (const [creds, re] of bad) {
    t.throws(
      () => parseProxmoxConfig(`clusters:\n  - url: https://pve:8006/api2/json\n    region: r\n${creds}`, 'c.yaml'),
      re,
      String(re),
    );
  }
});

t.test('unknown keys at every level are warnings naming the key', async (t) => {
  const c = parseProxmoxConfig(
    `features:
  provider: default
  colour: blue
clusters:
  - url: https://pve:8006/api2/json
    token_id: "kubernetes-csi@pve!csi"
    token_secret: "${SECRET}"
    region: homelab
    timeout: 30
extra:
  a: 1
`,
    'c.yaml',
  );
  t.equal(c.clusters.length, 1);
  t.equal(c.warnings?.length, 3);
  t.match(c.warnings?.join('\n'), /features\.colour/);
  t.match(c.warnings?.join('\n'), /clusters\[0\]\.timeout/);
  t.match(c.warnings?.join('\n'), /c\.yaml: extra is not a key/);
  const p = parseProxmoxConfig(
    `features:\n  provider: proxmox\nclusters:\n  - url: https://pve:8006/api2/json\n    username: root@pam\n    password: x\n    region: r\n`,
    'c.yaml',
  );
  t.equal(p.provider, 'default', 'upstream only tests for capmox; its chart comment says "proxmox"');
  t.match(p.warnings?.[0], /features\.provider "proxmox"/);
});

t.test('expansion_helpers (ours): a list of VM names; anything else is refused', async (t) => {
  const base = `clusters:\n  - url: https://pve:8006/api2/json\n    token_id: "kubernetes-csi@pve!csi"\n    token_secret: "${SECRET}"\n    region: r\n`;
  t.same(
    parseProxmoxConfig(`${base}    expansion_helpers: [talos-worker-1, " talos-worker-2 "]\n`, 'c.yaml').clusters[0]
      ?.expansionHelpers,
    ['talos-worker-1', 'talos-worker-2'],
  );
  t.equal(
    present(parseProxmoxConfig(base, 'c.yaml').clusters[0], 'clusters[0]').expansionHelpers,
    undefined,
    'unset: the Kubernetes Nodes decide',
  );
  t.same(parseProxmoxConfig(`${base}    expansion_helpers: [a]\n`, 'c.yaml').warnings, [], 'a known key');
  for (const bad of ['talos-worker-1', '[]', '[""]', '[1]']) {
    t.throws(
      () => parseProxmoxConfig(`${base}    expansion_helpers: ${bad}\n`, 'c.yaml'),
      /expansion_helpers must be a non-empty list of VM names/,
      bad,
    );
  }
});
