// Which names of a tar archive may be unpacked into a claim directory, and as what. An entry
// lands strictly inside the target: an absolute name, a `..` step or a NUL is refused (a
// hostile or broken archive is bad input), `.` steps and repeated slashes are dropped, and the
// names `.` and `./` are the target itself. The unpacker (tar-unpack.ts) creates entries only
// inside directories it made itself from this archive, so no entry is ever written through a
// symlink or a file, wherever a symlink's target points; a hard link must name an earlier
// entry of the archive by the same rules.
import { InvalidArgument } from '../../../errors.js';

/** The segments of an entry name below the target ([] for the target itself). */
export function entrySegments(name: string): string[] {
  const why = unsafeName(name);
  if (why)
    throw new InvalidArgument(`archive entry "${printable(name)}" ${why}; nothing is unpacked from such an archive`);
  return name.split('/').filter((s) => s !== '' && s !== '.');
}

/** Why a name may not be unpacked, or undefined when it may. */
export function unsafeName(name: string): string | undefined {
  if (name.includes('\0')) return 'holds a NUL byte';
  if (name.startsWith('/')) return 'is an absolute path';
  if (name.split('/').includes('..')) return 'steps out of the target with ".."';
  if (name.split('/').some((s) => Buffer.byteLength(s) > 255)) return 'has a name longer than 255 bytes';
  return undefined;
}

/** Control characters shown as escapes, so an error message cannot forge log lines. */
export const printable = (s: string) =>
  s.replace(/\p{Cc}/gu, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`).slice(0, 512);
