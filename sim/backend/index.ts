// Chooses the disk backend at start.

import { join } from 'node:path';
import { hostExec } from './exec.js';
import { SparseFiles } from './files.js';
import { LoopHotplug, NoopHotplug } from './loop.js';
import { QmpHotplug } from './qmp.js';
import type { BackendKind, DiskBackend, Exec } from './types.js';

export interface BackendOptions {
  kind: BackendKind;
  stateDir: string;
  loopLinkDir: string;
  qmp: Record<number, string>;
  exec?: Exec;
}

export function createBackend(opts: BackendOptions): DiskBackend {
  const files = opts.kind === 'none' ? undefined : new SparseFiles(join(opts.stateDir, 'images'));
  const hotplug =
    opts.kind === 'loop'
      ? new LoopHotplug(opts.exec ?? hostExec, opts.loopLinkDir)
      : opts.kind === 'qmp'
        ? new QmpHotplug(opts.qmp)
        : new NoopHotplug();
  return { kind: opts.kind, files, hotplug, close: () => hotplug.close() };
}

export type { BackendKind, DiskBackend, Exec } from './types.js';
