// The one wrapper every node handler of both drivers runs its work in: serialised per volume
// (a retry of a call, and the other calls for the same volume, queue behind it) and whatever is
// thrown below turned into a typed error naming the call, the volume and the path. The request's
// fields were checked once before, by the Node service (src/node/service.ts, src/csi/validate.ts).
import { FailedPrecondition } from '../errors.js';
import type { KeyedLock } from '../locks.js';
import { isCommandError } from '../os/exec.js';
import { asCsiError } from './common.js';

export interface NodeCall {
  rpc: string;
  volumeId: string;
  /** The path the call acts on, for messages. */
  path: string;
  /** Serialise on the volume id in these locks; absent for calls that only read (stats). */
  locks?: KeyedLock;
  /** For calls that unmount: a "busy" umount becomes FAILED_PRECONDITION with these words. */
  inUse?: string;
}

export function nodeCall<T>(call: NodeCall, fn: () => Promise<T>): Promise<T> {
  const work = async (): Promise<T> => {
    try {
      return await fn();
    } catch (e) {
      if (call.inUse !== undefined && isCommandError(e, 'exit') && /busy/i.test(e.stderr)) {
        throw new FailedPrecondition(`volume ${call.volumeId}: ${call.inUse}: ${e.stderr}`, { cause: e });
      }
      throw asCsiError(e, `${call.rpc} ${call.volumeId} at ${call.path}`);
    }
  };
  return call.locks ? call.locks.run(call.volumeId, work) : work();
}
