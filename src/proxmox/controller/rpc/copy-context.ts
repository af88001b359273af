// What the copy machinery (../copy/) needs of one RPC: the cluster, the controller VM, the
// call's signal and log. Its own file because snapshot, restore and clone RPCs all build it and
// import each other otherwise (restore › snapshot › volumes › restore was a cycle).
import type * as T from '../../../csi/types.js';
import type { Core } from '../core.js';
import type { CopyContext } from '../copy/thin-copy.js';
import type { Cluster } from '../state/cluster.js';

export const copyContext = (core: Core, cluster: Cluster, ctx: T.CallContext): CopyContext => ({
  cluster,
  controllerVmId: core.controllerVmId,
  signal: ctx.signal,
  log: (msg, fields) => ctx.log.info(fields ?? {}, msg),
});
