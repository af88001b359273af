// What test/release/tier.sh hands the release tests: the local registry (scripts/lib/registry.sh
// writes its env file) and the two releases it built and pushed there (release.env of
// scripts/release.sh): N-1 from a fixed older commit and N from this tree. Also helm against
// that registry and the k8s tier's cluster, and the program as pulled from the registry.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { present } from '../../helpers/present.js';
import { helmBinary } from '../../k8s/lib/chart.js';
import type { ImageCommand } from '../../k8s/lib/pods.js';

export interface Registry {
  /** 127.0.0.1:PORT */
  host: string;
  /** The test CA (PEM file) helm gets as --ca-file. */
  ca: string;
  /** A directory with ca.crt: podman/skopeo --cert-dir. */
  certDir: string;
}

export interface Release {
  version: string;
  revision: string;
  /** repository:tag in the registry. */
  image: string;
  repository: string;
  digest: string;
  /** oci://HOST/.../charts/pve-nfs-csi */
  chartRef: string;
}

function envFile(file: string): Record<string, string> {
  return Object.fromEntries(
    fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

const need = (name: string) =>
  present(process.env[name], `${name} (set by test/release/tier.sh: run the tests through it)`);

export function registry(): Registry {
  const e = envFile(path.join(need('RELEASE_REGISTRY_DIR'), 'env'));
  return {
    host: present(e.REGISTRY, 'REGISTRY'),
    ca: present(e.REGISTRY_CA, 'REGISTRY_CA'),
    certDir: present(e.REGISTRY_CERT_DIR, 'REGISTRY_CERT_DIR'),
  };
}

/** A release as scripts/release.sh described it in DIR/release.env. */
export function release(dir: string): Release {
  const e = envFile(path.join(dir, 'release.env'));
  const image = present(e.IMAGE, `IMAGE in ${dir}/release.env`);
  return {
    version: present(e.VERSION, 'VERSION'),
    revision: present(e.REVISION, 'REVISION'),
    image,
    repository: image.slice(0, image.lastIndexOf(':')),
    digest: present(e.DIGEST, 'DIGEST'),
    chartRef: present(e.CHART_REF, 'CHART_REF'),
  };
}

/** N-1 (the older commit's release) and N (this tree's). */
export const releases = () => ({ prev: release(need('RELEASE_PREV_DIR')), next: release(need('RELEASE_NEXT_DIR')) });

/** helm with its own homes (nothing of the user's) and the registry's CA; `kubeconfig` for cluster calls. */
export function helm(args: string[], o: { kubeconfig?: string; dir: string }): string {
  const env = {
    ...process.env,
    HELM_CACHE_HOME: path.join(o.dir, 'helm/cache'),
    HELM_CONFIG_HOME: path.join(o.dir, 'helm/config'),
    HELM_DATA_HOME: path.join(o.dir, 'helm/data'),
    ...(o.kubeconfig && { KUBECONFIG: o.kubeconfig }),
  };
  return execFileSync(helmBinary(), args, { encoding: 'utf8', env, maxBuffer: 64 << 20, stdio: 'pipe' });
}

/** podman with the storage and settings of scripts/lib/containers.sh (exported by the script). */
export function podman(args: string[]): string {
  return execFileSync('podman', args, { encoding: 'utf8', maxBuffer: 64 << 20, stdio: 'pipe' });
}

/**
 * Pulls `image` from the registry (TLS with the test CA) and copies its /app out: the program
 * the k8s tier's pods then run as the image's entry point would (image/entrypoint.sh sizing the
 * heap, then node on the bundle), on the tests' Node, which is the image's major. Returns the
 * command and the pull time.
 */
export function pullProgram(reg: Registry, image: string, dest: string): { cmd: ImageCommand; pullMs: number } {
  const t0 = Date.now();
  podman(['pull', '--quiet', '--cert-dir', reg.certDir, image]);
  const pullMs = Date.now() - t0;
  const ctr = podman(['create', image]).trim();
  try {
    fs.mkdirSync(dest, { recursive: true });
    podman(['cp', `${ctr}:/app`, dest]);
  } finally {
    podman(['rm', '--force', ctr]);
  }
  const app = path.join(dest, 'app');
  return {
    cmd: {
      cmd: ['env', `PVE_NFS_CSI_MAIN=${path.join(app, 'dist/bundle/main.js')}`, 'sh', path.join(app, 'entrypoint.sh')],
    },
    pullMs,
  };
}

export const tmpDir = (prefix: string) => fs.mkdtempSync(path.join(os.tmpdir(), prefix));
