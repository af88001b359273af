// NFSv3 and MOUNTv3 status codes (RFC 1813) and how they map onto the project's typed errors.
import { CsiError, type ErrorKind } from '../../errors.js';

export const NFS3_OK = 0;
export const NFS3ERR = {
  PERM: 1,
  NOENT: 2,
  IO: 5,
  NXIO: 6,
  ACCES: 13,
  EXIST: 17,
  XDEV: 18,
  NODEV: 19,
  NOTDIR: 20,
  ISDIR: 21,
  INVAL: 22,
  FBIG: 27,
  NOSPC: 28,
  ROFS: 30,
  MLINK: 31,
  NAMETOOLONG: 63,
  NOTEMPTY: 66,
  DQUOT: 69,
  STALE: 70,
  REMOTE: 71,
  BADHANDLE: 10001,
  NOT_SYNC: 10002,
  BAD_COOKIE: 10003,
  NOTSUPP: 10004,
  TOOSMALL: 10005,
  SERVERFAULT: 10006,
  BADTYPE: 10007,
  JUKEBOX: 10008,
} as const;

const NAMES = new Map<number, string>(Object.entries(NFS3ERR).map(([k, v]) => [v, `NFS3ERR_${k}`]));

export function statusName(status: number): string {
  return NAMES.get(status) ?? `status ${status}`;
}

/** A lookup table from groups of status codes: `[value, codes]` rows, a later row winning. */
export function byStatus<V>(rows: ReadonlyArray<readonly [V, readonly number[]]>): ReadonlyMap<number, V> {
  return new Map(rows.flatMap(([v, codes]) => codes.map((c) => [c, v] as const)));
}

// NFSv4 keeps NFSv3's numbers for the errors both have (RFC 7530 §13.1), so these two tables
// serve both protocols; nfs4.ts adds the rows of its own codes.

/** The typed error (and so the gRPC code) of a status; anything else is Internal. */
export const NFS_ERROR_KINDS = byStatus<ErrorKind>([
  ['NotFound', [NFS3ERR.NOENT]],
  ['AlreadyExists', [NFS3ERR.EXIST]],
  ['ResourceExhausted', [NFS3ERR.NOSPC, NFS3ERR.DQUOT]],
  ['InvalidArgument', [NFS3ERR.NAMETOOLONG]],
  [
    'FailedPrecondition',
    [NFS3ERR.PERM, NFS3ERR.ACCES, NFS3ERR.ROFS, NFS3ERR.NOTDIR, NFS3ERR.ISDIR, NFS3ERR.NOTEMPTY, NFS3ERR.XDEV],
  ],
  ['Unavailable', [NFS3ERR.STALE, NFS3ERR.BADHANDLE, NFS3ERR.JUKEBOX, NFS3ERR.IO, NFS3ERR.SERVERFAULT]],
]);

/** What the operator can do about a status, appended to the message. */
export const NFS_ERROR_HINTS = byStatus<string>([
  [
    ' (permission denied: the export must grant root read-write access without root squash to this client)',
    [NFS3ERR.PERM, NFS3ERR.ACCES],
  ],
  [' (the export is read-only)', [NFS3ERR.ROFS]],
  [' (server busy, retry later)', [NFS3ERR.JUKEBOX]],
]);

/** An NFS or MOUNT procedure answered with a non-OK status. `status` keeps the raw code. */
export class NfsStatusError extends CsiError {
  constructor(
    readonly status: number,
    readonly proc: string,
    what: string,
  ) {
    super(
      NFS_ERROR_KINDS.get(status) ?? 'Internal',
      `NFS ${proc} ${what}: ${statusName(status)}${NFS_ERROR_HINTS.get(status) ?? ''}`,
    );
  }
}

export function isNfsStatus(e: unknown, ...statuses: number[]): e is NfsStatusError {
  return e instanceof NfsStatusError && statuses.includes(e.status);
}

/** The handle no longer names an object on the server; walk again from the share root. */
export function isStale(e: unknown): boolean {
  return isNfsStatus(e, NFS3ERR.STALE, NFS3ERR.BADHANDLE);
}

const MNT_NAMES: Record<number, string> = {
  1: 'MNT3ERR_PERM',
  2: 'MNT3ERR_NOENT',
  5: 'MNT3ERR_IO',
  13: 'MNT3ERR_ACCES',
  20: 'MNT3ERR_NOTDIR',
  22: 'MNT3ERR_INVAL',
  63: 'MNT3ERR_NAMETOOLONG',
  10004: 'MNT3ERR_NOTSUPP',
  10006: 'MNT3ERR_SERVERFAULT',
};

/** MOUNT refused a path. NOENT/ACCES are worth retrying with a parent path (see session.ts). */
export class MountStatusError extends CsiError {
  constructor(
    readonly status: number,
    path: string,
    server: string,
  ) {
    const name = MNT_NAMES[status] ?? `status ${status}`;
    const kind: ErrorKind =
      status === 2 ? 'NotFound' : status === 1 || status === 13 ? 'FailedPrecondition' : 'Internal';
    super(
      kind,
      `NFS server ${server} refused to mount ${path}: ${name}` +
        (status === 1 || status === 13
          ? ' (is the share exported to this client, and are non-privileged source ports allowed?)'
          : ''),
    );
  }
}
