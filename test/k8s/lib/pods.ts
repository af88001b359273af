// Runs the containers of a real Pod object (created by the Deployment / DaemonSet controllers
// from the rendered chart) as local processes, doing the parts of a kubelet that matter to them:
//  - the ServiceAccount token comes from the TokenRequest API, bound to the Pod, and sits with
//    ca.crt and namespace at /var/run/secrets/kubernetes.io/serviceaccount in a private mount
//    namespace (a tmpfs over /run), with KUBERNETES_SERVICE_HOST/PORT set: client-go's
//    in-cluster config, exactly as in the pod, so the chart's RBAC is what authorizes them;
//  - the hostname is the Pod's name (private UTS namespace), which the sidecars' leader
//    election uses as identity;
//  - emptyDir/hostPath volumes become directories under the pod's run directory and secret
//    volumes are written from the Secret; the one change made to the rendered arguments is
//    that a path under a volume's mountPath points into that directory, and a listen address
//    (pods have their own network namespace; these processes share the host's) gets a free
//    loopback port;
//  - env: values and the fieldRefs the chart uses.
import fs from 'node:fs';
import path from 'node:path';
import { start, type Proc } from '../../harness/procs.js';
import { freePort } from '../../helpers/free-port.js';
import { present } from '../../helpers/present.js';
import type { Kube } from './kube.js';
import type { Pod, Secret, TokenRequest } from './objects.js';

export interface ImageCommand {
  /** Command line that stands for the image's entry point. */
  cmd: string[];
  /** The image tag this binary was built at; a mismatch with the rendered image fails. */
  version?: string;
}

export interface PodRunOptions {
  kube: Kube;
  apiPort: number;
  ca: string;
  /** Pod object as read from the API. */
  pod: Pod;
  dir: string;
  /** Image (repository:tag, or the repository for any tag) -> how to run it; others are skipped. */
  images: Record<string, ImageCommand>;
  /** Only these containers (default: every container whose image is known). */
  only?: string[];
  /** Extra environment per container name (e.g. where the test's NFS server listens). */
  extraEnv?: Record<string, Record<string, string>>;
}

export interface RunningPod {
  name: string;
  namespace: string;
  procs: Map<string, Proc>;
  /** Containers not run because their image has no local binary. */
  skipped: string[];
  /** Endpoint rewrites: rendered path -> local path. */
  volumeDir(name: string): string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

function fieldRef(pod: Pod, fieldPath: string): string {
  const v: Record<string, string | undefined> = {
    'metadata.name': pod.metadata.name,
    'metadata.namespace': pod.metadata.namespace,
    'metadata.uid': pod.metadata.uid,
    'spec.nodeName': pod.spec.nodeName,
    'spec.serviceAccountName': pod.spec.serviceAccountName,
    // No kubelet, no pod network: the processes listen on loopback.
    'status.podIP': '127.0.0.1',
    'status.hostIP': '127.0.0.1',
  };
  if (!(fieldPath in v)) throw new Error(`pod runner: fieldRef ${fieldPath} is not supported`);
  return v[fieldPath] ?? '';
}

export async function runPod(o: PodRunOptions): Promise<RunningPod> {
  const { pod, kube } = o;
  const name = pod.metadata.name;
  const ns = present(pod.metadata.namespace, `pod ${name}: metadata.namespace`);
  // Short (unix socket paths end up under here and must stay below 108 bytes) and unique.
  const podDir = path.join(o.dir, pod.metadata.uid.slice(0, 8));
  fs.mkdirSync(podDir, { recursive: true });

  // The projected service-account volume, as kubelet writes it.
  const saDir = path.join(podDir, 'serviceaccount');
  fs.mkdirSync(saDir, { recursive: true });
  if (pod.spec.automountServiceAccountToken !== false) {
    const sa = present(pod.spec.serviceAccountName, `pod ${name}: spec.serviceAccountName`);
    const tr = await kube.create<TokenRequest>(`/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { expirationSeconds: 3600, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name, uid: pod.metadata.uid } },
    });
    fs.writeFileSync(path.join(saDir, 'token'), present(tr.status?.token, 'TokenRequest status.token'));
    fs.writeFileSync(path.join(saDir, 'ca.crt'), o.ca);
    fs.writeFileSync(path.join(saDir, 'namespace'), ns);
  }

  // hostPath volumes share one tree per pod (its "host"), so nested ones (kubelet dir and a
  // plugin dir inside it) see each other as on a node; the rest get a directory each.
  const volumes = new Map<string, string>(
    (pod.spec.volumes ?? []).map((v) => [
      v.name,
      v.hostPath ? path.join(podDir, 'host', v.hostPath.path) : path.join(podDir, 'v', v.name),
    ]),
  );
  const volumeDir = (v: string) => {
    const d = volumes.get(v);
    if (!d) throw new Error(`pod ${name}: no volume ${v}`);
    return d;
  };
  for (const v of pod.spec.volumes ?? []) {
    const d = volumeDir(v.name);
    fs.mkdirSync(d, { recursive: true });
    if (v.secret) {
      const secretName = present(v.secret.secretName, `pod ${name}: volume ${v.name} secret.secretName`);
      const data = (await kube.get<Secret>(`/api/v1/namespaces/${ns}/secrets/${secretName}`)).data ?? {};
      const items = v.secret.items ?? Object.keys(data).map((k) => ({ key: k, path: k }));
      for (const it of items) {
        const value = data[it.key];
        if (value === undefined) throw new Error(`pod ${name}: Secret ${secretName} has no key ${it.key}`);
        fs.writeFileSync(path.join(d, it.path), Buffer.from(value, 'base64'));
      }
    }
  }

  const procs = new Map<string, Proc>();
  const skipped: string[] = [];
  const logs = path.join(o.dir, 'logs', name);
  fs.mkdirSync(logs, { recursive: true });
  for (const c of pod.spec.containers) {
    if (o.only && !o.only.includes(c.name)) continue;
    const image = present(c.image, `pod ${name}: container ${c.name} image`);
    const [repo = image, tag] = image.split(/:(?=[^:/]+$)/);
    // A release's own tag first (an upgrade runs two tags of one repository), then the repository.
    const img = o.images[image] ?? o.images[repo];
    if (!img) {
      skipped.push(c.name);
      continue;
    }
    if (img.version && tag !== img.version) {
      throw new Error(
        `pod ${name}: container ${c.name} wants ${image} but the tier built ${repo}:${img.version}; run scripts/k8s-build.sh`,
      );
    }
    const env: Record<string, string> = {
      KUBERNETES_SERVICE_HOST: '127.0.0.1',
      KUBERNETES_SERVICE_PORT: String(o.apiPort),
      HOSTNAME: name,
      ...o.extraEnv?.[c.name],
    };
    for (const e of c.env ?? []) {
      if (e.value !== undefined) env[e.name] = e.value;
      else if (e.valueFrom?.fieldRef) env[e.name] = fieldRef(pod, e.valueFrom.fieldRef.fieldPath);
      else
        throw new Error(
          `pod runner: env ${e.name} of ${c.name} uses an unsupported source ${JSON.stringify(e.valueFrom)}`,
        );
    }
    // Longest mountPath first, so /csi/proxmox wins over /csi.
    const mounts = [...(c.volumeMounts ?? [])].sort((a, b) => b.mountPath.length - a.mountPath.length);
    const args: string[] = [];
    for (const raw of [...(c.command ?? []), ...(c.args ?? [])]) {
      // $(VAR) references are expanded from the container's env, as kubelet does.
      let a = raw.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n: string) => env[n] ?? m);
      for (const m of mounts) {
        const re = new RegExp(`(^|[=:/])${m.mountPath.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?=/|$)`);
        if (re.test(a)) {
          a = a.replace(re, (_all, pre: string) => `${pre}${volumeDir(m.name)}`);
          break;
        }
      }
      // A listen address inside the pod's own network namespace -> a free loopback port here.
      const listen = /^(--[\w-]+=)?(0\.0\.0\.0|127\.0\.0\.1|\[::\])?:(\d+)$/.exec(a);
      if (listen) a = `${listen[1] ?? ''}127.0.0.1:${await freePort()}`;
      args.push(a);
    }
    const sandbox = [
      'mount -t tmpfs -o mode=0755 tmpfs /run',
      'mkdir -p /run/secrets/kubernetes.io/serviceaccount',
      'cp -r "$POD_SA_DIR"/. /run/secrets/kubernetes.io/serviceaccount/',
      'hostname "$POD_HOSTNAME"',
      'exec "$@"',
    ].join(' && ');
    const proc = start(
      `${name}/${c.name}`,
      'unshare',
      ['--mount', '--uts', '--propagation', 'private', '--', 'sh', '-c', sandbox, 'sh', ...img.cmd, ...args],
      {
        logFile: path.join(logs, `${c.name}.log`),
        env: { ...env, POD_SA_DIR: saDir, POD_HOSTNAME: name },
      },
    );
    procs.set(c.name, proc);
  }
  return {
    name,
    namespace: ns,
    procs,
    skipped,
    volumeDir,
    async stop(signal = 'SIGTERM') {
      await Promise.all([...procs.values()].map((p) => p.stop(signal, signal === 'SIGKILL' ? 0 : 10_000)));
    },
  };
}
