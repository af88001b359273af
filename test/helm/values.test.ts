// How values change the render: drivers switched off, inline Proxmox config, StorageClass
// defaults and overrides, and values that values.schema.json or the templates must refuse.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse } from 'yaml';
import { present } from '../helpers/present.js';
import {
  container,
  flag,
  inlineCluster,
  mountAt,
  mountedVolume,
  podSpec,
  render,
  renderError,
  volume,
  type K8sObject,
} from './helm.js';
import { PROXMOX_DRIVER_NAME } from '../../src/proxmox/contract.js';
import { NFS_DRIVER_NAME } from '../../src/nfs/contract.js';

const PROXMOX = PROXMOX_DRIVER_NAME;
const NFS = NFS_DRIVER_NAME;
const names = (objs: K8sObject[]) => objs.map((o) => o.metadata.name).sort();
const containers = (o: K8sObject) =>
  podSpec(o)
    .containers.map((c) => c.name)
    .sort();
const nfsClass = (i: number, name: string, server = 'nas.example', share = '/export') => [
  `nfs.storageClasses[${i}].name=${name}`,
  `nfs.storageClasses[${i}].parameters.server=${server}`,
  `nfs.storageClasses[${i}].parameters.share=${share}`,
];

t.test('NFS driver off: nothing of it is rendered', async (t) => {
  const r = render({ set: ['nfs.enabled=false', ...nfsClass(0, 'ignored')] });
  t.strictSame(names(r.all('CSIDriver')), [PROXMOX]);
  t.strictSame(names(r.all('StorageClass')), ['proxmox-local']);
  const ctl = r.one('Deployment');
  t.strictSame(containers(ctl), ['proxmox-attacher', 'proxmox-provisioner', 'proxmox-resizer', 'pve-nfs-csi']);
  t.equal(flag(container(podSpec(ctl), 'pve-nfs-csi').args, '--nfs-endpoint'), undefined);
  t.equal(podSpec(ctl).securityContext?.sysctls, undefined, 'no low source ports without NFS');
  const node = r.one('DaemonSet');
  t.strictSame(containers(node), ['proxmox-registrar', 'pve-nfs-csi']);
  t.equal(flag(container(podSpec(node), 'pve-nfs-csi').args, '--nfs-endpoint'), undefined);
  t.notOk(JSON.stringify(r.objects).includes(NFS), 'the NFS driver name appears nowhere');
});

t.test('Proxmox driver off: no attacher, capacity, config or hot-plug RBAC', async (t) => {
  const r = render({ set: ['proxmox.enabled=false', ...nfsClass(0, 'nfs')] });
  t.strictSame(names(r.all('CSIDriver')), [NFS]);
  t.strictSame(names(r.all('StorageClass')), ['nfs']);
  const ctl = podSpec(r.one('Deployment'));
  t.strictSame(containers(r.one('Deployment')), ['nfs-provisioner', 'nfs-resizer', 'pve-nfs-csi']);
  const plugin = container(ctl, 'pve-nfs-csi');
  t.equal(flag(plugin.args, '--proxmox-endpoint'), undefined);
  t.equal(flag(plugin.args, '--proxmox-config'), undefined);
  t.equal(mountAt(plugin, '/etc/proxmox'), undefined);
  t.equal(r.find('ClusterRole', 'pve-pve-nfs-csi-external-attacher'), undefined);
  t.equal(r.find('Role', 'pve-pve-nfs-csi-capacity'), undefined);
  const node = podSpec(r.one('DaemonSet'));
  t.strictSame(containers(r.one('DaemonSet')), ['nfs-registrar', 'pve-nfs-csi']);
  t.equal(
    mountedVolume(node, container(node, 'nfs-registrar'), '/csi').hostPath?.path,
    `/var/lib/kubelet/plugins/${NFS}`,
  );
  t.notOk(JSON.stringify(r.objects).includes(PROXMOX), 'the Proxmox driver name appears nowhere');
});

t.test('both drivers off is refused', async (t) => {
  t.match(renderError({ set: ['proxmox.enabled=false', 'nfs.enabled=false'] }), /both drivers are disabled/);
});

t.test('capacity tracking off also turns off storageCapacity in the CSIDriver', async (t) => {
  const r = render({ set: ['proxmox.capacity.enabled=false'] });
  t.equal((r.get('CSIDriver', PROXMOX).spec as { storageCapacity: boolean }).storageCapacity, false);
  const prov = container(podSpec(r.one('Deployment')), 'proxmox-provisioner');
  t.notOk(prov.args?.includes('--enable-capacity'));
  t.equal(r.find('Role', 'pve-pve-nfs-csi-capacity'), undefined);
});

t.test('inline Proxmox config becomes a Secret the controller mounts', async (t) => {
  // existingConfigSecret keeps its default (the upstream Secret's name): listing clusters inline is enough.
  const set = [
    ...inlineCluster({
      url: 'https://pve.example:8006/api2/json',
      insecure: 'false',
      token_id: 'kubernetes-csi@pve!csi',
      token_secret: '00000000-0000-0000-0000-000000000000',
      region: 'homelab',
    }),
    'proxmox.config.features.controllerVmID=9999',
  ];
  const r = render({ set });
  const secret = r.get('Secret', 'pve-pve-nfs-csi-proxmox-config');
  const config = parse(
    present((secret.stringData as Record<string, string | undefined>)['config.yaml'], 'config.yaml in the Secret'),
  ) as {
    clusters: Record<string, unknown>[];
    features: { controllerVmID: number };
  };
  t.equal(config.clusters[0]?.region, 'homelab');
  t.equal(config.clusters[0]?.token_id, 'kubernetes-csi@pve!csi');
  t.equal(config.features.controllerVmID, 9999);
  const ctl = r.one('Deployment');
  t.same(volume(podSpec(ctl), 'proxmox-config').secret, {
    secretName: 'pve-pve-nfs-csi-proxmox-config',
    items: [{ key: 'config.yaml', path: 'config.yaml' }],
  });
  const annotations = (ctl.spec as { template: { metadata: { annotations?: Record<string, string> } } }).template
    .metadata.annotations;
  const before = annotations?.['checksum/proxmox-config'];
  t.match(before, /^[0-9a-f]{64}$/, 'a config change rolls the controller');
  const changed = render({ set: [...set, 'proxmox.config.clusters[0].region=other'] }).one('Deployment');
  const after = (changed.spec as { template: { metadata: { annotations?: Record<string, string> } } }).template.metadata
    .annotations;
  t.not(after?.['checksum/proxmox-config'], before);
  t.match(renderError({ set: ['proxmox.existingConfigSecret='] }), /proxmox\.config\.clusters is empty/);
  const blanked = render({ set: ['proxmox.existingConfigSecret=', ...set] });
  t.equal(blanked.get('Secret', 'pve-pve-nfs-csi-proxmox-config').kind, 'Secret', 'blanking it as before still works');
  const none = render({});
  t.equal(none.find('Secret', 'pve-pve-nfs-csi-proxmox-config'), undefined, 'no inline clusters: nothing rendered');
  t.same(volume(podSpec(none.one('Deployment')), 'proxmox-config').secret, {
    secretName: 'proxmox-csi-plugin',
    items: [{ key: 'config.yaml', path: 'config.yaml' }],
  });
});

t.test('Node topology labels: on by default with the rights to patch Nodes, off by a value', async (t) => {
  const on = render({});
  const args = container(podSpec(on.one('Deployment')), 'pve-nfs-csi').args ?? [];
  t.equal(args[args.indexOf('--node-topology-labels') + 1], 'on');
  const role = on.get('ClusterRole', 'pve-pve-nfs-csi-node-topology');
  t.same(role.rules, [
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'patch'] },
    { apiGroups: [''], resources: ['events'], verbs: ['create'] },
  ]);
  t.ok(on.get('ClusterRoleBinding', 'pve-pve-nfs-csi-node-topology'));
  const off = render({ set: ['proxmox.nodeTopologyLabels=false'] });
  const offArgs = container(podSpec(off.one('Deployment')), 'pve-nfs-csi').args ?? [];
  t.equal(offArgs[offArgs.indexOf('--node-topology-labels') + 1], 'off');
  t.equal(off.find('ClusterRole', 'pve-pve-nfs-csi-node-topology'), undefined, 'no rights to patch Nodes');
  t.equal(render({ set: ['proxmox.enabled=false'] }).find('ClusterRole', 'pve-pve-nfs-csi-node-topology'), undefined);
});

t.test('existing Secret under another key', async (t) => {
  const r = render({ set: ['proxmox.existingConfigSecret=pve-creds', 'proxmox.existingConfigSecretKey=cloud.yaml'] });
  t.same(volume(podSpec(r.one('Deployment')), 'proxmox-config').secret, {
    secretName: 'pve-creds',
    items: [{ key: 'cloud.yaml', path: 'config.yaml' }],
  });
  t.equal(r.all('Secret').length, 0);
});

t.test('a minimal NFS class gets the syno-nfs-csi defaults; a class can override them', async (t) => {
  const r = render({
    set: [
      ...nfsClass(0, 'plain'),
      ...nfsClass(1, 'kept', 'nas2.example', '/srv'),
      'nfs.storageClasses[1].reclaimPolicy=Retain',
      'nfs.storageClasses[1].allowVolumeExpansion=false',
      'nfs.storageClasses[1].parameters.onDelete=retain',
      'nfs.storageClasses[1].parameters.subDir=',
      'nfs.storageClasses[1].mountOptions[0]=nfsvers=4.1',
    ],
  });
  const plain = r.get('StorageClass', 'plain');
  t.equal(plain.volumeBindingMode, 'Immediate');
  t.equal(plain.reclaimPolicy, 'Delete');
  t.equal(plain.allowVolumeExpansion, true);
  t.strictSame(plain.parameters, {
    server: 'nas.example',
    share: '/export',
    subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
    onDelete: 'archive',
  });
  t.equal(plain.mountOptions, undefined);
  const kept = r.get('StorageClass', 'kept');
  t.equal(kept.reclaimPolicy, 'Retain');
  t.equal(kept.allowVolumeExpansion, false, 'false wins over a true default');
  t.strictSame(kept.parameters, { server: 'nas2.example', share: '/srv', onDelete: 'retain' }, '"" removes a default');
  t.strictSame(kept.mountOptions, ['nfsvers=4.1']);
  t.match(
    renderError({ set: ['nfs.storageClasses[0].name=x', 'nfs.storageClasses[0].parameters.server=a'] }),
    /"x" of nfs\.csi\.k8s\.io needs parameters\.share/,
  );
});

t.test('Proxmox class overrides and numbers', async (t) => {
  const r = render({
    set: [
      'proxmox.storageClasses[0].name=fast-xfs',
      'proxmox.storageClasses[0].parameters.storage=nvme',
      'proxmox.storageClasses[0].parameters.csi\\.storage\\.k8s\\.io/fstype=xfs',
      'proxmox.storageClasses[0].parameters.diskIOPS=4000',
      'proxmox.storageClasses[0].parameters.cache=none',
      'proxmox.storageClasses[0].parameters.backup=false',
    ],
  });
  t.strictSame(names(r.all('StorageClass')), ['fast-xfs']);
  const sc = r.get('StorageClass', 'fast-xfs');
  t.equal(sc.metadata.annotations, undefined, 'not the default class unless asked');
  t.strictSame(sc.parameters, {
    storage: 'nvme',
    'csi.storage.k8s.io/fstype': 'xfs',
    diskIOPS: '4000',
    cache: 'none',
    backup: 'false',
    ssd: 'true',
  });
  t.match(
    renderError({ set: ['proxmox.storageClasses[0].name=nostore'] }),
    /"nostore" of csi\.proxmox\.sinextra\.dev needs parameters\.storage/,
  );
});

t.test('values.schema.json refuses bad values', async (t) => {
  const refused: [string, RegExp][] = [
    ['proxmox.storageClassDefaults.parameters.cache=fast', /cache/],
    ['proxmox.storageClasses[0].parameters.csi\\.storage\\.k8s\\.io/fstype=btrfs', /fstype/],
    ['proxmox.storageClasses[0].reclaimPolicy=Recycle', /reclaimPolicy/],
    ['proxmox.storageClasses[0].volumeBindingMode=Later', /volumeBindingMode/],
    ['nfs.storageClassDefaults.parameters.onDelete=trash', /onDelete/],
    ['nfs.storageClassDefaults.parameters.mountPermissions=0999', /mountPermissions/],
    ['nfs.storageClassDefaults.parameters.subDir=a/../b', /subDir/],
    ['nfs.storageClassDefaults.parameters.vers=4', /vers/],
    ['logLevel=loud', /logLevel/],
    ['drainTimeout=soon', /drainTimeout/],
    ['node.kubeletDir=var/lib/kubelet', /kubeletDir/],
    ['node.maxVolumesPerNode=31', /maxVolumesPerNode/],
    ['metrics.controllerPort=70000', /controllerPort/],
    ['proxmox.capacity.enabled=yes', /enabled/],
    ['controlller.replicas=2', /controlller/],
    ['metrics.nodeAddress=10.0.0.5', /nodeAddress/],
    ['metrics.serviceMonitor.interval=often', /interval/],
    ['controller.podDisruptionBudget.maxUnavailable=0', /maxUnavailable/],
    ['sidecars.livenessProbe.image.tag=v1', /livenessProbe/],
  ];
  for (const [set, field] of refused) {
    const err = renderError({ set: [set] });
    t.match(err, /values don't meet the specifications of the schema/, `${set} fails the schema`);
    t.match(err, field, `${set}: the error names the field`);
  }
});

t.test('node.maxVolumesPerNode: passed to the Proxmox node plugin only when set', async (t) => {
  const plugin = (set: string[]) => container(podSpec(render({ set }).one('DaemonSet')), 'pve-nfs-csi');
  t.equal(flag(plugin([]).args, '--max-volumes-per-node'), undefined, 'default: the free SCSI slots');
  t.equal(flag(plugin(['node.maxVolumesPerNode=4']).args, '--max-volumes-per-node'), '4');
});

t.test('kubelet directory and host network are followed everywhere', async (t) => {
  const r = render({ set: ['node.kubeletDir=/var/lib/k0s/kubelet', 'node.hostNetwork=false'] });
  const node = podSpec(r.one('DaemonSet'));
  const plugin = container(node, 'pve-nfs-csi');
  t.equal(flag(plugin.args, '--proxmox-endpoint'), `unix:///var/lib/k0s/kubelet/plugins/${PROXMOX}/csi.sock`);
  t.equal(mountAt(plugin, '/var/lib/k0s/kubelet')?.mountPropagation, 'Bidirectional');
  t.equal(flag(plugin.args, '--kubelet-dir'), '/var/lib/k0s/kubelet', 'node calls confined to that directory');
  const reg = container(node, 'nfs-registrar');
  t.equal(flag(reg.args, '--kubelet-registration-path'), `/var/lib/k0s/kubelet/plugins/${NFS}/csi.sock`);
  t.equal(flag(reg.args, '--http-endpoint'), ':29663', 'on the pod network the health port is the pod IP');
  t.equal(reg.livenessProbe?.httpGet?.host, undefined);
  t.equal(flag(plugin.args, '--metrics-address'), '0.0.0.0:29664', 'on the pod network: the pod IP, not the node');
  t.same(plugin.livenessProbe?.httpGet, { path: '/healthz', port: 29664 });
  t.equal(node.hostNetwork, false);
});

t.test('image tag defaults to the chart appVersion', async (t) => {
  const img = (set: string[]) => container(podSpec(render({ set }).one('DaemonSet')), 'pve-nfs-csi').image;
  const chart = parse(readFileSync(new URL('../../charts/pve-nfs-csi/Chart.yaml', import.meta.url), 'utf8')) as {
    appVersion: string;
  };
  t.equal(img([]), `ghcr.io/pve-nfs-csi/pve-nfs-csi:${chart.appVersion}`);
  t.equal(img(['image.repository=registry.lan/csi', 'image.tag=dev']), 'registry.lan/csi:dev');
});

t.test('inline NFS volumes are opt-in: the CSIDriver lists Ephemeral only when enabled', async (t) => {
  const spec = (set: string[]) =>
    render({ set }).get('CSIDriver', NFS).spec as { volumeLifecycleModes: string[]; attachRequired: boolean };
  t.strictSame(spec([]).volumeLifecycleModes, ['Persistent'], 'off by default, like upstream');
  const on = spec(['nfs.enableInlineVolume=true']);
  t.strictSame(on.volumeLifecycleModes, ['Persistent', 'Ephemeral']);
  t.equal(on.attachRequired, false);
  t.strictSame(
    (
      render({ set: ['nfs.enableInlineVolume=true'] }).get('CSIDriver', PROXMOX).spec as {
        volumeLifecycleModes: string[];
      }
    ).volumeLifecycleModes,
    ['Persistent'],
    'never for Proxmox disks',
  );
  t.match(renderError({ set: ['nfs.enableInlineVolume=maybe'] }), /enableInlineVolume/);
});

t.test("controller.defaultOnDeletePolicy (csi-driver-nfs's name) reaches the NFS controller", async (t) => {
  const arg = (set: string[]) =>
    flag(
      container(podSpec(render({ set: [...set, ...nfsClass(0, 'nfs')] }).one('Deployment')), 'pve-nfs-csi').args,
      '--default-ondelete-policy',
    );
  t.equal(arg([]), 'delete', "upstream's default");
  t.equal(arg(['controller.defaultOnDeletePolicy=retain']), 'retain');
  t.match(
    renderError({ set: ['controller.defaultOnDeletePolicy=retian'] }),
    /defaultOnDeletePolicy/,
    'a typo is refused by the schema',
  );
  const off = container(podSpec(render({ set: ['nfs.enabled=false'] }).one('Deployment')), 'pve-nfs-csi').args;
  t.equal(flag(off, '--default-ondelete-policy'), undefined, 'not passed without the NFS driver');
});
