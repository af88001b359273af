// What the NFS ownership tests share: a controller on a private ganesha, CSI requests for it,
// a picture of everything on the server's disk (so a test sees any path a call created, renamed
// or removed, in every export and outside them) and the error a call answered.
import fs from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import { isCsiError } from '../../../src/errors.js';
import { createNfsController, type NfsControllerOptions } from '../../../src/nfs/controller/controller.js';
import type { Ganesha } from './ganesha.js';

export const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };

const cap: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
  accessType: 'mount',
};

export function controllerOn(g: Ganesha, extra: Partial<NfsControllerOptions> = {}) {
  return createNfsController({
    log: pino({ level: 'silent' }),
    callTimeoutMs: 3000,
    nfsPort: g.nfsPort,
    mountPort: g.mountPort,
    ...extra,
  });
}

export function createReq(name: string, parameters: Record<string, string>): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: String(1 << 30), limitBytes: '0' },
    volumeCapabilities: [cap],
    parameters,
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}

/** `kind: message` of a rejected call, or 'ok'. */
export async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return isCsiError(e) ? `${e.kind}: ${e.message}` : `not a CsiError: ${String(e)}`;
  }
}

/** Every path below `root` on the local disk with its inode and type (symlinks not followed). */
export async function picture(root: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (dir: string): Promise<void> => {
    for (const e of await fs.readdir(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      const st = await fs.lstat(p);
      out.set(path.relative(root, p), `${st.ino}:${e.isDirectory() ? 'd' : e.isSymbolicLink() ? 'l' : 'f'}`);
      if (e.isDirectory()) await walk(p);
    }
  };
  await walk(root);
  return out;
}

/** What differs between two pictures: paths gone, new, or now another object. */
export function changes(before: Map<string, string>, after: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [p, id] of before) if (after.get(p) !== id) out.push(after.has(p) ? `~${p}` : `-${p}`);
  for (const p of after.keys()) if (!before.has(p)) out.push(`+${p}`);
  return out.sort();
}
