// The NFS node plugin over a FakeSystem (no real mount runs): what the node tests share.
import { pino } from 'pino';
import { createNfsNode, type NfsNodeOptions } from '../../../../src/nfs/node/node.js';
import { createLinuxMounter } from '../../../../src/os/mounter.js';
import type { FakeSystem } from '../../os/fakes.js';

export function nfsNodeOn(sys: FakeSystem, kubeletDir: string, opts: Partial<NfsNodeOptions> = {}) {
  return createNfsNode({
    nodeId: 'talos-w1',
    log: pino({ level: 'silent' }),
    mountTimeoutMs: 5000,
    kubeletDir,
    exec: sys,
    mounter: createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo }),
    ...opts,
  });
}
