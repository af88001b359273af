// Runs prepare.sh (idempotent, cached) and returns what QEMU needs to boot the guest.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export interface GuestArtifacts {
  kernel: string;
  initrd: string;
  /** The guest kernel's full module tree (lib/modules/<kver>) in the cache. */
  modules: string;
  kver: string;
  /** Second-stage init, run inside the guest from the host's tree. */
  stage2: string;
}

let cached: Promise<GuestArtifacts> | undefined;

export function prepareGuest(log: (l: string) => void): Promise<GuestArtifacts> {
  cached ??= run(log).catch((e: unknown) => {
    cached = undefined;
    throw e;
  });
  return cached;
}

async function run(log: (l: string) => void): Promise<GuestArtifacts> {
  const child = spawn('bash', [path.join(here, 'prepare.sh')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    err += d;
    for (const l of d.split('\n')) if (l.trim()) log(l);
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`test/vm/prepare.sh failed (exit ${code}):\n${err.slice(-3000)}`);
  const last = out.trim().split('\n').pop() ?? '';
  const kv = Object.fromEntries(last.split(' ').map((p) => p.split('=') as [string, string]));
  const { kernel, initrd, modules, kver } = kv;
  if (!kernel || !initrd || !modules || !kver) throw new Error(`test/vm/prepare.sh printed no artifacts: ${last}`);
  return { kernel, initrd, modules, kver, stage2: path.join(here, 'guest-init.sh') };
}
