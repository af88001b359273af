// What the chart renders with its defaults and with the seed cluster's values: driver objects,
// socket wiring, privileges, RBAC and StorageClasses, checked field by field.
import t from 'tap';
import {
  SEED_VALUES,
  allows,
  container,
  flag,
  mountAt,
  mountedVolume,
  podSpec,
  render,
  rules,
  volume,
  type Container,
  type K8sObject,
  type PodSpec,
} from './helm.js';
import { present } from '../helpers/present.js';
import { FSTYPE_KEY, PROXMOX_DRIVER_NAME } from '../../src/proxmox/contract.js';
import { NFS_DRIVER_NAME } from '../../src/nfs/contract.js';

const PROXMOX = PROXMOX_DRIVER_NAME;
const NFS = NFS_DRIVER_NAME;
const defaults = render();
const seed = render({ valuesFiles: [SEED_VALUES], namespace: 'csi-proxmox', release: 'pve-nfs-csi' });

const controllerOf = (r = defaults) => podSpec(r.one('Deployment'));
const nodeOf = (r = defaults) => podSpec(r.one('DaemonSet'));

t.test('CSIDriver objects keep the upstream names and specs', async (t) => {
  const proxmox = defaults.get('CSIDriver', PROXMOX).spec as Record<string, unknown>;
  t.equal(proxmox.attachRequired, true);
  t.equal(proxmox.podInfoOnMount, true);
  t.equal(proxmox.storageCapacity, true);
  t.strictSame(proxmox.volumeLifecycleModes, ['Persistent']);
  const nfs = defaults.get('CSIDriver', NFS).spec as Record<string, unknown>;
  t.equal(nfs.attachRequired, false);
  t.equal(nfs.fsGroupPolicy, 'File');
  t.not(nfs.storageCapacity, true);
  t.equal(defaults.all('CSIDriver').length, 2);
});

/**
 * Each sidecar reaches its driver through the volume it mounts at /csi; the driver container
 * must mount that same volume and serve the driver's endpoint inside it.
 */
function socketWiring(spec: PodSpec, sidecar: string, endpointFlag: string) {
  const plugin = container(spec, 'pve-nfs-csi');
  const side = container(spec, sidecar);
  const vol = mountAt(side, '/csi')?.name ?? '(none)';
  const inPlugin = (plugin.volumeMounts ?? []).find((m) => m.name === vol);
  return {
    csiAddress: flag(side.args, '--csi-address'),
    emptyDir: volume(spec, vol).emptyDir !== undefined,
    endpoint: flag(plugin.args, endpointFlag),
    socketInVolume: inPlugin ? `unix://${inPlugin.mountPath}/csi.sock` : '(volume not mounted in the driver container)',
  };
}

t.test('controller: one driver process, each driver with its own sidecars', async (t) => {
  // On a cluster that serves VolumeSnapshots, so that every sidecar is there (snapshots.enabled: auto).
  const spec = controllerOf(render({ apiVersions: ['snapshot.storage.k8s.io/v1/VolumeSnapshotContent'] }));
  const names = spec.containers.map((c) => c.name).sort();
  t.strictSame(names, [
    'nfs-provisioner',
    'nfs-resizer',
    'nfs-snapshotter',
    'proxmox-attacher',
    'proxmox-provisioner',
    'proxmox-resizer',
    'proxmox-snapshotter',
    'pve-nfs-csi',
  ]);
  const plugin = container(spec, 'pve-nfs-csi');
  t.equal(flag(plugin.args, '--mode'), 'controller');
  t.equal(flag(plugin.args, '--proxmox-endpoint'), 'unix:///csi/proxmox/csi.sock');
  t.equal(flag(plugin.args, '--nfs-endpoint'), 'unix:///csi/nfs/csi.sock');
  t.equal(flag(plugin.args, '--proxmox-config'), '/etc/proxmox/config.yaml');
  t.equal(flag(plugin.args, '--metrics-address'), '0.0.0.0:9810');
  t.equal(mountAt(plugin, '/etc/proxmox')?.readOnly, true);
  t.same(mountedVolume(spec, plugin, '/etc/proxmox').secret, {
    secretName: 'proxmox-csi-plugin',
    items: [{ key: 'config.yaml', path: 'config.yaml' }],
  });
  for (const [s, endpoint] of [
    ['proxmox-provisioner', '--proxmox-endpoint'],
    ['proxmox-attacher', '--proxmox-endpoint'],
    ['proxmox-resizer', '--proxmox-endpoint'],
    ['proxmox-snapshotter', '--proxmox-endpoint'],
    ['nfs-provisioner', '--nfs-endpoint'],
    ['nfs-resizer', '--nfs-endpoint'],
    ['nfs-snapshotter', '--nfs-endpoint'],
  ] as const) {
    const w = socketWiring(spec, s, endpoint);
    t.equal(w.csiAddress, '/csi/csi.sock', `${s} socket address`);
    t.ok(w.emptyDir, `${s} socket volume is an emptyDir`);
    t.equal(w.endpoint, w.socketInVolume, `${endpoint} is the socket ${s} reaches`);
  }
  t.equal((spec.volumes ?? []).filter((v) => v.hostPath).length, 0, 'no host paths in the controller');
});

t.test('controller sidecar arguments', async (t) => {
  const spec = controllerOf();
  for (const s of spec.containers.filter((c) => /-(provisioner|attacher|resizer|snapshotter)$/.test(c.name))) {
    t.ok(s.args?.includes('--leader-election'), `${s.name} elects a leader`);
    t.match(flag(s.args, '--timeout'), /^\d+m$/, `${s.name} has a timeout`);
  }
  const pp = container(spec, 'proxmox-provisioner');
  t.ok(pp.args?.includes('--extra-create-metadata'));
  t.ok(pp.args?.includes('--enable-capacity'));
  t.equal(flag(pp.args, '--capacity-ownerref-level'), '2');
  t.equal(flag(pp.args, '--default-fstype'), 'ext4');
  const env = (c: Container, name: string) => c.env?.find((e) => e.name === name)?.valueFrom?.fieldRef?.fieldPath;
  t.equal(env(pp, 'NAMESPACE'), 'metadata.namespace', 'capacity tracking knows its namespace');
  t.equal(env(pp, 'POD_NAME'), 'metadata.name', 'capacity tracking knows its pod');
  const np = container(spec, 'nfs-provisioner');
  t.ok(np.args?.includes('--extra-create-metadata'), 'NFS subDir templates need the PVC name and namespace');
  t.notOk(np.args?.includes('--enable-capacity'), 'no capacity for NFS');
  t.equal(flag(np.args, '--default-fstype'), undefined, 'no filesystem type for NFS volumes');
  t.equal(flag(container(spec, 'proxmox-resizer').args, '--handle-volume-inuse-error'), 'false');
  // The driver probes both of its sockets itself (/healthz): a livenessprobe sidecar could watch
  // one, and a failing sidecar probe would restart the sidecar, not the driver.
  const plugin = container(spec, 'pve-nfs-csi');
  t.same(
    plugin.livenessProbe?.httpGet,
    { path: '/healthz', port: 'metrics' },
    'the driver is restarted when a socket stops answering',
  );
  t.ok(plugin.ports?.some((p) => p.name === 'metrics' && p.containerPort === 9810));
  for (const c of spec.containers.filter((c) => c.image.startsWith('registry.k8s.io/'))) {
    t.match(
      c.image,
      /^registry\.k8s\.io\/sig-storage\/(csi-provisioner|csi-attacher|csi-resizer|csi-snapshotter):v\d+\.\d+\.\d+$/,
      c.name,
    );
  }
});

t.test('controller runs without privileges', async (t) => {
  const spec = controllerOf();
  t.equal(spec.securityContext?.runAsNonRoot, true);
  t.not(spec.securityContext?.runAsUser, 0);
  t.strictSame(spec.securityContext?.sysctls, [{ name: 'net.ipv4.ip_unprivileged_port_start', value: '0' }]);
  t.equal(spec.hostNetwork, undefined);
  for (const c of spec.containers) {
    const sc = c.securityContext ?? {};
    t.equal(sc.runAsNonRoot, true, `${c.name} non-root`);
    t.equal(sc.readOnlyRootFilesystem, true, `${c.name} read-only root`);
    t.equal(sc.allowPrivilegeEscalation, false, `${c.name} no escalation`);
    t.ok(sc.capabilities?.drop?.includes('ALL'), `${c.name} drops all capabilities`);
    t.equal(sc.capabilities?.add, undefined, `${c.name} adds none`);
    t.not(sc.privileged, true, `${c.name} not privileged`);
  }
});

t.test('node: privileged plugin, kubelet dir, /dev, /sys, one registrar per driver', async (t) => {
  const spec = nodeOf();
  t.equal(spec.hostNetwork, true, 'NFS mounts survive a restart of the pod');
  t.equal(spec.securityContext?.runAsUser, 0);
  const plugin = container(spec, 'pve-nfs-csi');
  t.equal(plugin.securityContext?.privileged, true);
  t.equal(flag(plugin.args, '--mode'), 'node');
  t.equal(plugin.env?.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
  const kubelet = mountAt(plugin, '/var/lib/kubelet');
  t.equal(kubelet?.mountPropagation, 'Bidirectional');
  t.equal(mountedVolume(spec, plugin, '/var/lib/kubelet').hostPath?.path, '/var/lib/kubelet');
  t.equal(flag(plugin.args, '--kubelet-dir'), '/var/lib/kubelet', 'node calls confined to the kubelet dir it mounts');
  for (const dir of ['/dev', '/sys']) {
    t.equal(mountedVolume(spec, plugin, dir).hostPath?.path, dir, `${dir} from the host`);
  }
  for (const [name, driver, endpoint] of [
    ['proxmox-registrar', PROXMOX, '--proxmox-endpoint'],
    ['nfs-registrar', NFS, '--nfs-endpoint'],
  ] as const) {
    const r = container(spec, name);
    const hostDir = `/var/lib/kubelet/plugins/${driver}`;
    t.equal(flag(r.args, '--csi-address'), '/csi/csi.sock');
    t.equal(flag(r.args, '--kubelet-registration-path'), `${hostDir}/csi.sock`);
    t.same(mountedVolume(spec, r, '/csi').hostPath, { path: hostDir, type: 'DirectoryOrCreate' });
    t.equal(mountedVolume(spec, r, '/registration').hostPath?.path, '/var/lib/kubelet/plugins_registry');
    // The driver sees the host's kubelet dir at the same path, so the host path is its socket.
    t.equal(flag(plugin.args, endpoint), `unix://${hostDir}/csi.sock`);
    t.equal(r.livenessProbe?.httpGet?.host, '127.0.0.1', `${name} health stays on loopback`);
    t.equal(String(r.livenessProbe?.httpGet?.port), flag(r.args, '--http-endpoint')?.split(':')[1]);
    t.equal(r.securityContext?.privileged, undefined, `${name} not privileged`);
    t.equal(r.securityContext?.allowPrivilegeEscalation, false);
    t.ok(r.securityContext?.capabilities?.drop?.includes('ALL'));
  }
  t.same(spec.tolerations, [{ operator: 'Exists' }], 'runs on every node by default');
  t.equal(
    spec.containers.find((c) => c.name === 'liveness-probe'),
    undefined,
    'the driver probes its sockets itself',
  );
  t.equal(
    flag(plugin.args, '--metrics-address'),
    '$(HOST_IP):29664',
    'metrics and health on the node address: Prometheus scrapes it',
  );
  t.same(plugin.livenessProbe?.httpGet, { path: '/healthz', port: 29664 }, 'probed on the pod IP, the node IP');
  const loop = container(nodeOf(render({ set: ['metrics.nodeAddress=127.0.0.1'] })), 'pve-nfs-csi');
  t.equal(flag(loop.args, '--metrics-address'), '127.0.0.1:29664', 'or on loopback only');
  t.same(loop.livenessProbe?.httpGet, { path: '/healthz', port: 29664, host: '127.0.0.1' });
});

t.test(
  'VolumeAttributesClass: on by default in the Proxmox provisioner and resizer, one value turns it off',
  async (t) => {
    const gate = (spec: PodSpec, name: string) =>
      (container(spec, name).args ?? []).filter((a) => a.startsWith('--feature-gates'));
    for (const name of ['proxmox-provisioner', 'proxmox-resizer']) {
      t.strictSame(gate(controllerOf(), name), [], `${name}: the GA gate is left to probe the v1 API`);
    }
    const off = controllerOf(render({ set: ['proxmox.volumeAttributesClass=false'] }));
    for (const name of ['proxmox-provisioner', 'proxmox-resizer']) {
      t.strictSame(gate(off, name), ['--feature-gates=VolumeAttributesClass=false'], name);
    }
    // What the sidecars read: the class of a PVC, and the PVC status they write the result to.
    t.ok(
      allows(
        defaults.get('ClusterRole', 'pve-pve-nfs-csi-external-provisioner'),
        'storage.k8s.io',
        'volumeattributesclasses',
        'watch',
      ),
    );
    const rsz = defaults.get('ClusterRole', 'pve-pve-nfs-csi-external-resizer');
    t.ok(allows(rsz, 'storage.k8s.io', 'volumeattributesclasses', 'watch'));
    t.ok(allows(rsz, '', 'persistentvolumeclaims/status', 'patch'));
    t.ok(allows(rsz, '', 'persistentvolumes', 'patch'));
  },
);

t.test('RBAC: least privilege per component', async (t) => {
  for (const role of [...defaults.all('ClusterRole'), ...defaults.all('Role')]) {
    for (const r of rules(role)) {
      t.notOk([...r.verbs, ...r.resources, ...r.apiGroups].includes('*'), `${role.metadata.name}: no wildcards`);
      t.notOk(r.resources.includes('secrets'), `${role.metadata.name}: no secrets`);
    }
  }
  const node = defaults.get('ClusterRole', 'pve-pve-nfs-csi-node');
  t.strictSame(rules(node), [{ apiGroups: [''], resources: ['nodes'], verbs: ['get'] }]);
  const prov = defaults.get('ClusterRole', 'pve-pve-nfs-csi-external-provisioner');
  t.ok(allows(prov, '', 'persistentvolumes', 'create'));
  t.ok(allows(prov, '', 'persistentvolumes', 'delete'));
  t.ok(allows(prov, '', 'persistentvolumeclaims', 'update'));
  t.ok(allows(prov, 'storage.k8s.io', 'csinodes', 'watch'));
  const att = defaults.get('ClusterRole', 'pve-pve-nfs-csi-external-attacher');
  t.ok(allows(att, 'storage.k8s.io', 'volumeattachments', 'patch'));
  t.ok(allows(att, 'storage.k8s.io', 'volumeattachments/status', 'patch'));
  t.notOk(allows(att, '', 'persistentvolumes', 'delete'));
  const rsz = defaults.get('ClusterRole', 'pve-pve-nfs-csi-external-resizer');
  t.ok(allows(rsz, '', 'persistentvolumeclaims/status', 'patch'));
  t.notOk(allows(rsz, '', 'persistentvolumes', 'create'));
  t.ok(allows(defaults.get('Role', 'pve-pve-nfs-csi-leader-election'), 'coordination.k8s.io', 'leases', 'update'));
  const cap = defaults.get('Role', 'pve-pve-nfs-csi-capacity');
  t.ok(allows(cap, 'storage.k8s.io', 'csistoragecapacities', 'create'));
  t.ok(allows(cap, 'apps', 'replicasets', 'get'));
  // Every binding points at a rendered role and at the service account its pods run as.
  const accounts = new Map([
    ['pve-pve-nfs-csi-controller', controllerOf().serviceAccountName],
    ['pve-pve-nfs-csi-node', nodeOf().serviceAccountName],
  ]);
  for (const b of [...defaults.all('ClusterRoleBinding'), ...defaults.all('RoleBinding')]) {
    const ref = b.roleRef as { kind: string; name: string };
    t.ok(defaults.find(ref.kind, ref.name), `${b.metadata.name} -> ${ref.kind}/${ref.name} exists`);
    for (const s of b.subjects as { name: string; namespace: string }[]) {
      t.equal(accounts.get(s.name), s.name, `${b.metadata.name} binds a service account a pod uses`);
      t.equal(s.namespace, 'csi-storage');
      t.ok(defaults.find('ServiceAccount', s.name));
    }
  }
  t.notOk(
    allows(defaults.get('ClusterRole', 'pve-pve-nfs-csi-node'), '', 'nodes', 'list'),
    'a node reads only its own Node',
  );
});

const params = (sc: K8sObject) => sc.parameters as Record<string, string>;

t.test('default StorageClass reproduces proxmox-local', async (t) => {
  t.equal(defaults.all('StorageClass').length, 1, 'no NFS class without a server');
  const sc = defaults.get('StorageClass', 'proxmox-local');
  t.equal(sc.provisioner, PROXMOX);
  t.equal(sc.metadata.annotations?.['storageclass.kubernetes.io/is-default-class'], 'true');
  t.equal(sc.volumeBindingMode, 'WaitForFirstConsumer');
  t.equal(sc.reclaimPolicy, 'Delete');
  t.equal(sc.allowVolumeExpansion, true);
  t.strictSame(params(sc), {
    storage: 'local-lvm',
    [FSTYPE_KEY]: 'ext4',
    backup: 'true',
    cache: 'writethrough',
    ssd: 'true',
  });
});

t.test('seed values reproduce the seed cluster', async (t) => {
  const local = seed.get('StorageClass', 'proxmox-local');
  t.strictSame(
    {
      p: local.provisioner,
      b: local.volumeBindingMode,
      r: local.reclaimPolicy,
      e: local.allowVolumeExpansion,
      params: params(local),
    },
    {
      p: PROXMOX,
      b: 'WaitForFirstConsumer',
      r: 'Delete',
      e: true,
      params: { storage: 'local-lvm', [FSTYPE_KEY]: 'ext4', backup: 'true', cache: 'writethrough', ssd: 'true' },
    },
  );
  t.equal(local.metadata.annotations?.['storageclass.kubernetes.io/is-default-class'], 'true');
  const nfs = seed.get('StorageClass', 'syno-nfs-csi');
  t.strictSame(
    {
      p: nfs.provisioner,
      b: nfs.volumeBindingMode,
      r: nfs.reclaimPolicy,
      e: nfs.allowVolumeExpansion,
      params: params(nfs),
    },
    {
      p: NFS,
      b: 'Immediate',
      r: 'Delete',
      e: true,
      params: {
        server: 'nas.local.bigd.no',
        share: '/volume1/k8s-volumes/talos',
        subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
        onDelete: 'archive',
      },
    },
  );
  t.equal(
    nfs.metadata.annotations?.['storageclass.kubernetes.io/is-default-class'],
    undefined,
    'only one default class',
  );
  const ctl = controllerOf(seed);
  t.equal(volume(ctl, 'proxmox-config').secret?.secretName, 'proxmox-csi-plugin');
  t.equal(ctl.nodeSelector?.['node-role.kubernetes.io/control-plane'], '');
  const cp = { key: 'node-role.kubernetes.io/control-plane', operator: 'Exists', effect: 'NoSchedule' };
  t.same(ctl.tolerations, [cp]);
  t.ok(
    nodeOf(seed).tolerations?.some((x) => x.key === cp.key && x.effect === 'NoSchedule'),
    'node plugin runs on control planes',
  );
  t.equal(seed.all('Secret').length, 0, 'the ExternalSecret owns the config, the chart does not');
  for (const o of seed.objects.filter((o) => o.metadata.namespace !== undefined))
    t.equal(o.metadata.namespace, 'csi-proxmox');
});

t.test('metrics Services select the pods that serve the port', async (t) => {
  t.equal(
    render({ set: ['metrics.nodeAddress=127.0.0.1'] }).find('Service', 'pve-pve-nfs-csi-node-metrics'),
    undefined,
    'no node Service while the node listens on loopback',
  );
  // The default: Prometheus reaches the node plugins (the NFS claim-usage alert reads them).
  const reachable = defaults;
  const node = nodeOf(reachable);
  const plugin = container(node, 'pve-nfs-csi');
  t.equal(flag(plugin.args, '--metrics-address'), '$(HOST_IP):29664', 'the node address, not every interface');
  t.equal(plugin.env?.find((e) => e.name === 'HOST_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.hostIP');
  t.equal(plugin.livenessProbe?.httpGet?.host, undefined, 'probed on the pod IP, which is the node IP');
  t.equal(
    flag(container(nodeOf(render({ set: ['metrics.nodeAddress=0.0.0.0'] })), 'pve-nfs-csi').args, '--metrics-address'),
    '0.0.0.0:29664',
  );
  for (const [component, spec, port] of [
    ['controller', controllerOf(reachable), 9810],
    ['node', node, 29664],
  ] as const) {
    const svc = reachable.get('Service', `pve-pve-nfs-csi-${component}-metrics`).spec as {
      selector: Record<string, string>;
      ports: { port: number; targetPort: string }[];
    };
    const workload = present(
      reachable.objects.find(
        (o) => ['Deployment', 'DaemonSet'].includes(o.kind) && o.metadata.name.endsWith(component),
      ),
      `the ${component} workload`,
    );
    const labels = (workload.spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata
      .labels;
    for (const [k, v] of Object.entries(svc.selector)) t.equal(labels[k], v, `${component} selector ${k}`);
    const svcPort = present(svc.ports[0], `the ${component} metrics Service port`);
    t.equal(svcPort.port, port);
    t.ok(container(spec, 'pve-nfs-csi').ports?.some((p) => p.name === svcPort.targetPort && p.containerPort === port));
  }
});

t.test('two controller replicas: a PodDisruptionBudget and a soft spread over nodes and zones', async (t) => {
  const dep = defaults.one('Deployment');
  t.equal((dep.spec as { replicas: number }).replicas, 2);
  const spec = podSpec(dep) as PodSpec & {
    affinity?: {
      podAntiAffinity?: {
        preferredDuringSchedulingIgnoredDuringExecution?: {
          podAffinityTerm: { topologyKey: string; labelSelector: { matchLabels: Record<string, string> } };
        }[];
      };
    };
    topologySpreadConstraints?: {
      topologyKey: string;
      whenUnsatisfiable: string;
      maxSkew: number;
      labelSelector: { matchLabels: Record<string, string> };
    }[];
  };
  const podLabels = (dep.spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata
    .labels;
  const selects = (m: Record<string, string>) => Object.entries(m).every(([k, v]) => podLabels[k] === v);
  const anti = spec.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
  t.same(
    anti.map((a) => a.podAffinityTerm.topologyKey),
    ['kubernetes.io/hostname'],
    'prefers another node',
  );
  t.ok(anti.every((a) => selects(a.podAffinityTerm.labelSelector.matchLabels)));
  const spread = spec.topologySpreadConstraints ?? [];
  t.same(
    spread.map((c) => [c.topologyKey, c.whenUnsatisfiable, c.maxSkew]),
    [
      ['kubernetes.io/hostname', 'ScheduleAnyway', 1],
      ['topology.kubernetes.io/zone', 'ScheduleAnyway', 1],
    ],
    'soft, so a one-node cluster still runs both',
  );
  t.ok(spread.every((c) => selects(c.labelSelector.matchLabels)));
  const pdb = defaults.get('PodDisruptionBudget', 'pve-pve-nfs-csi-controller');
  const pdbSpec = pdb.spec as { maxUnavailable: number; selector: { matchLabels: Record<string, string> } };
  t.equal(pdbSpec.maxUnavailable, 1);
  t.ok(selects(pdbSpec.selector.matchLabels), 'the budget covers the controller pods');
  t.equal(pdb.apiVersion, 'policy/v1');

  const one = render({ set: ['controller.replicas=1'] });
  t.equal(one.all('PodDisruptionBudget').length, 0, 'one replica: no budget (it would block every drain)');
  t.equal(
    (podSpec(one.one('Deployment')) as { topologySpreadConstraints?: unknown }).topologySpreadConstraints,
    undefined,
  );
  const own = render({
    set: [
      'controller.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=a',
      'controller.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists',
    ],
  });
  const ownAffinity = (podSpec(own.one('Deployment')) as { affinity?: Record<string, unknown> }).affinity;
  t.same(
    Object.keys(ownAffinity ?? {}),
    ['nodeAffinity'],
    'an affinity of the user replaces the default anti-affinity',
  );
});

t.test('ServiceMonitor: optional, one per scrapeable metrics Service', async (t) => {
  t.equal(defaults.all('ServiceMonitor').length, 0, 'auto: none where the cluster has no ServiceMonitor CRD');
  t.same(
    render({ apiVersions: ['monitoring.coreos.com/v1/ServiceMonitor'] })
      .all('ServiceMonitor')
      .map((o) => o.metadata.name),
    ['pve-pve-nfs-csi-controller', 'pve-pve-nfs-csi-node'],
    'auto: controller and node where it has one',
  );
  t.equal(
    render({
      apiVersions: ['monitoring.coreos.com/v1/ServiceMonitor'],
      set: ['metrics.serviceMonitor.enabled=false'],
    }).all('ServiceMonitor').length,
    0,
    'false decides regardless',
  );
  const loop = render({
    set: [
      'metrics.serviceMonitor.enabled=true',
      'metrics.serviceMonitor.labels.release=kps',
      'metrics.nodeAddress=127.0.0.1',
    ],
  });
  t.same(
    loop.all('ServiceMonitor').map((o) => o.metadata.name),
    ['pve-pve-nfs-csi-controller'],
    'no node monitor while the node listens on loopback',
  );
  const both = render({ set: ['metrics.serviceMonitor.enabled=true'] });
  for (const component of ['controller', 'node']) {
    const sm = both.get('ServiceMonitor', `pve-pve-nfs-csi-${component}`);
    const svc = both.get('Service', `pve-pve-nfs-csi-${component}-metrics`);
    const spec = sm.spec as {
      selector: { matchLabels: Record<string, string> };
      endpoints: { port: string; path: string }[];
    };
    for (const [k, v] of Object.entries(spec.selector.matchLabels))
      t.equal(svc.metadata.labels?.[k], v, `${component} monitor selects its Service (${k})`);
    t.same(
      spec.endpoints.map((e) => [e.port, e.path]),
      [['metrics', '/metrics']],
    );
  }
  t.equal(loop.get('ServiceMonitor', 'pve-pve-nfs-csi-controller').metadata.labels?.release, 'kps');
  t.equal(
    render({ set: ['metrics.serviceMonitor.enabled=true', 'metrics.enabled=false'] }).all('ServiceMonitor').length,
    0,
  );
});

t.test('each driver socket is watched, whichever drivers are on; metrics off keeps the probe', async (t) => {
  for (const set of [['nfs.enabled=false'], ['proxmox.enabled=false'], ['metrics.enabled=false']]) {
    const r = render({ set });
    for (const spec of [controllerOf(r), nodeOf(r)]) {
      const plugin = container(spec, 'pve-nfs-csi');
      t.equal(plugin.livenessProbe?.httpGet?.path, '/healthz', `${set.join(' ')}: driver container probed`);
      t.ok(flag(plugin.args, '--metrics-address'), `${set.join(' ')}: the health port is served`);
    }
  }
  t.equal(render({ set: ['metrics.enabled=false'] }).all('Service').length, 0, 'metrics off: no Services');
});

t.test('resources match the memory budget the image sizes its heap from', async (t) => {
  type R = { resources?: { requests?: Record<string, string>; limits?: Record<string, string> } };
  const ctl = container(controllerOf(), 'pve-nfs-csi') as Container & R;
  const node = container(nodeOf(), 'pve-nfs-csi') as Container & R;
  // image/entrypoint.sh: old space = (limit - 96 MiB) / 2. 320Mi: 112 MiB, twice the findings
  // refresh's heap peak at 10,000 NFS claims (test/unit/metrics/findings-scale.test.ts).
  t.same(ctl.resources, { requests: { cpu: '20m', memory: '96Mi' }, limits: { memory: '320Mi' } });
  t.same(
    node.resources,
    { requests: { cpu: '20m', memory: '80Mi' }, limits: { memory: '256Mi' } },
    'mkfs and mount.nfs run in this cgroup too',
  );
});
