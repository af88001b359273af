// The opt-in archive-retention CronJob: off by default; on, `archives prune --older-than AGE --yes`
// under its own ServiceAccount that may list StorageClasses and PVs and nothing else, with the
// controller's pod security (non-root, privileged NFS source ports by sysctl). Its RBAC is also
// exercised against a real kube-apiserver in test/k8s/cli/archives.test.ts.
import t from 'tap';
import { container, render, renderError, SEED_VALUES, type K8sObject, type PodSpec, type PolicyRule } from './helm.js';

const cronOf = (objs: K8sObject[]) => objs.find((o) => o.kind === 'CronJob');
const podOf = (c: K8sObject) =>
  (c.spec as { jobTemplate: { spec: { template: { spec: PodSpec & { restartPolicy: string } } } } }).jobTemplate.spec
    .template.spec;

t.test('off by default', (t) => {
  t.equal(cronOf(render({ valuesFiles: [SEED_VALUES] }).objects), undefined);
  t.end();
});

t.test("on: prune args, its own least-privilege ServiceAccount, the controller's pod security", (t) => {
  const r = render({
    valuesFiles: [SEED_VALUES],
    set: ['archivePrune.enabled=true', 'archivePrune.olderThan=30d', 'archivePrune.classes={syno-nfs-csi}'],
  });
  const cron = cronOf(r.objects);
  if (!cron) throw new Error('no CronJob rendered');
  const spec = cron.spec as { schedule: string; concurrencyPolicy: string };
  t.equal(spec.schedule, '30 3 * * *');
  t.equal(spec.concurrencyPolicy, 'Forbid');
  const pod = podOf(cron);
  t.equal(pod.restartPolicy, 'Never');
  const c = container(pod, 'archive-prune');
  t.same(c.args, [
    'archives',
    'prune',
    '--older-than',
    '30d',
    '--class',
    'syno-nfs-csi',
    '--timeout',
    '3600s',
    '--yes',
  ]);
  t.equal(c.securityContext?.readOnlyRootFilesystem, true);
  t.ok(
    (pod.securityContext as { sysctls?: Array<{ name: string }> } | undefined)?.sysctls?.some(
      (s) => s.name === 'net.ipv4.ip_unprivileged_port_start',
    ),
    'privileged NFS source ports',
  );
  const role = r.get('ClusterRole', cron.metadata.name) as unknown as { rules: PolicyRule[] };
  t.same(role.rules, [
    { apiGroups: ['storage.k8s.io'], resources: ['storageclasses'], verbs: ['list'] },
    { apiGroups: [''], resources: ['persistentvolumes'], verbs: ['list'] },
  ]);
  t.equal(pod.serviceAccountName, cron.metadata.name);
  t.ok(r.find('ClusterRoleBinding', cron.metadata.name));
  t.notOk(JSON.stringify(pod).includes('proxmox'), 'no Proxmox credentials mounted');
  t.end();
});

t.test('not rendered without the NFS driver; the schema refuses an age that is not one', (t) => {
  t.equal(
    cronOf(render({ valuesFiles: [SEED_VALUES], set: ['archivePrune.enabled=true', 'nfs.enabled=false'] }).objects),
    undefined,
  );
  t.match(
    renderError({ valuesFiles: [SEED_VALUES], set: ['archivePrune.enabled=true', 'archivePrune.olderThan=soon'] }),
    /olderThan/,
  );
  t.end();
});
