// Size limits on the strings of a request, checked for every RPC of both drivers before anything
// else looks at them. Names, ids and node ids are short by nature (Kubernetes names ≤ 253
// characters, handles well under 1 KiB) and a path longer than PATH_MAX cannot name anything;
// without a bound a hostile megabyte-long value reached backends, logs and path walks (one node
// call spent its whole deadline resolving an 80 KB path component by component).
import { InvalidArgument } from '../errors.js';

/** Linux PATH_MAX, counting bytes: the longest node path a system call accepts. */
export const MAX_PATH_BYTES = 4096;
/** Names, volume ids, node ids, snapshot ids, tokens. */
export const MAX_ID_BYTES = 4096;

const PATH_FIELDS = new Set(['targetPath', 'stagingTargetPath', 'volumePath']);
const ID_FIELDS = new Set(['name', 'volumeId', 'nodeId', 'snapshotId', 'sourceVolumeId', 'startingToken']);

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** INVALID_ARGUMENT naming the field when one of the request's ids or paths is over its limit. */
export function checkLimits(req: unknown, method: string): void {
  if (typeof req !== 'object' || req === null) return;
  for (const [field, value] of Object.entries(req as Record<string, unknown>)) {
    if (typeof value !== 'string') continue;
    const limit = PATH_FIELDS.has(field) ? MAX_PATH_BYTES : ID_FIELDS.has(field) ? MAX_ID_BYTES : undefined;
    if (limit === undefined) continue;
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > limit) {
      throw new InvalidArgument(
        `${method}: ${snake(field)} is ${bytes} bytes long; at most ${limit} bytes are accepted (it begins ${JSON.stringify(value.slice(0, 64))})`,
      );
    }
  }
}
