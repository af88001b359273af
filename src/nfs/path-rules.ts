// The path and host rules of NFS StorageClass parameters: the share and server parsers beside
// their schema (param-keys.ts) and the subDir / volume-name checks (controller/params.ts) use one
// rule for a path segment, so what one accepts the other accepts too.
import { InvalidArgument } from '../errors.js';
import { hasControlCharacter } from '../control-characters.js';

const MAX_NAME_BYTES = 255;

/** Checks one path component; `what` names the parameter in the message. */
export function checkSegment(seg: string, what: string, full: string): void {
  if (seg === '')
    throw new InvalidArgument(`${what} "${full}" has an empty path segment (leading, trailing or double "/")`);
  if (seg === '.' || seg === '..') throw new InvalidArgument(`${what} "${full}" must not contain "${seg}" segments`);
  if (Buffer.byteLength(seg, 'utf8') > MAX_NAME_BYTES) {
    throw new InvalidArgument(
      `${what} "${full}": segment "${seg.slice(0, 40)}…" is longer than ${MAX_NAME_BYTES} bytes`,
    );
  }
  // '#' separates the fields of the volume handle; control characters have no place in a path.
  if (seg.includes('#') || hasControlCharacter(seg))
    throw new InvalidArgument(`${what} "${full}" must not contain "#" or control characters`);
}

/** A relative path below the share: no leading "/", no empty, "." or ".." segments. */
export function checkRelativePath(p: string, what: string): string {
  if (p.startsWith('/')) throw new InvalidArgument(`${what} "${p}" must be relative to the share, not absolute`);
  for (const seg of p.split('/')) checkSegment(seg, what, p);
  return p;
}

/** The share as an absolute path; surrounding slashes are optional in the parameter. */
export function normaliseShare(share: string): string {
  const trimmed = share.replace(/^\/+|\/+$/g, '');
  if (trimmed === '') return '/';
  for (const seg of trimmed.split('/')) checkSegment(seg, 'share', share);
  return '/' + trimmed;
}

export function checkServer(server: string): string {
  if (!server) throw new InvalidArgument('parameter "server" is required: the NFS server\'s host name or IP address');
  if (server.length > 253 || /[\s/#]/.test(server) || hasControlCharacter(server)) {
    throw new InvalidArgument(`parameter "server" value "${server}" is not a host name or IP address`);
  }
  return server;
}
