// The chart's preflight: a Helm test Pod (or a pre-install hook) running `pve-nfs-csi preflight`
// with the config Secret and a ConfigMap of exactly the values it reads, never the credentials;
// what preflight derives from that ConfigMap equals the StorageClasses the chart renders.
import t from 'tap';
import { parse } from 'yaml';
import { classesFromValues } from '../../src/cli/preflight.js';
import { present } from '../helpers/present.js';
import { container, inlineCluster, render, renderError, SEED_VALUES, type K8sObject } from './helm.js';

const preflight = (objs: K8sObject[], kind: string) =>
  objs.find((o) => o.kind === kind && o.metadata.name.endsWith('-preflight'));
const pod = (objs: K8sObject[]) => present(preflight(objs, 'Pod'), 'the preflight Pod');
const cm = (objs: K8sObject[]) => present(preflight(objs, 'ConfigMap'), 'the preflight ConfigMap');
const args = (p: K8sObject) => container(p.spec as never, 'preflight').args ?? [];

t.test('a helm test Pod by default, with the config Secret and the values it reads', async (t) => {
  const r = render({ valuesFiles: [SEED_VALUES] });
  const p = pod(r.objects);
  t.equal((p.metadata as { annotations?: Record<string, string> }).annotations?.['helm.sh/hook'], 'test');
  t.same(args(p).slice(0, 5), [
    'preflight',
    '--values',
    '/etc/preflight/values.yaml',
    '--config',
    '/etc/proxmox/config.yaml',
  ]);
  const data = (cm(r.objects) as unknown as { data: Record<string, string | undefined> }).data;
  const values = parse(present(data['values.yaml'], 'values.yaml in the ConfigMap')) as Record<string, unknown>;
  t.same(Object.keys(values).sort(), ['controller', 'nfs', 'proxmox']);
  const fromPreflight = classesFromValues(values)
    .map((c) => [c.name, c.parameters])
    .sort();
  const rendered = r
    .all('StorageClass')
    .map((o) => [o.metadata.name, (o as unknown as { parameters: Record<string, string> }).parameters])
    .sort();
  t.same(fromPreflight, rendered, 'preflight checks exactly the StorageClasses the chart creates');
});

t.test('never the credentials; pre-install hook and the old policy on request', async (t) => {
  const r = render({
    set: [
      ...inlineCluster({
        url: 'https://pve:8006/api2/json',
        token_id: 'a@pve!b',
        token_secret: 's3cr3t-value',
        region: 'homelab',
      }),
      'preflight.hook=pre-install',
      'preflight.previousDefaultOnDeletePolicy=retain',
    ],
  });
  t.notMatch(JSON.stringify(cm(r.objects)), /s3cr3t-value|token_secret/, 'the ConfigMap carries no secret');
  const p = pod(r.objects);
  t.equal(
    (p.metadata as { annotations?: Record<string, string> }).annotations?.['helm.sh/hook'],
    'pre-install,pre-upgrade',
  );
  t.match(args(p).join(' '), /--previous-default-ondelete-policy retain/);
  t.equal(preflight(render({ set: ['preflight.enabled=false'] }).objects, 'Pod'), undefined, 'off');
  t.match(renderError({ set: ['preflight.hook=sometimes'] }), /hook/);
});
