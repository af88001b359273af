// The kernel's mount table (/proc/self/mountinfo, proc(5)) read in-process instead of through a
// findmnt child: a node call looks at the mount table 2–4 times, and each findmnt fork+exec costs
// ~3.5 ms on a 2-core node against ~0.1 ms for the read (bench/node.ts). Reading it is as safe as
// findmnt was (findmnt reads this very file): the kernel prints it from its own mount structures
// and never asks a filesystem, so a dead NFS server cannot hang it. The entries come out as
// findmnt -l -o TARGET,SOURCE,FSTYPE,OPTIONS,FSROOT,MAJ:MIN printed them, so nothing downstream
// changes: SOURCE carries `[fsroot]` when a subtree is bound (`devtmpfs[/sdb]` for a device node
// bound onto a file), OPTIONS are the per-mount and the superblock options merged, read-only if
// either is.

/** One mount, as findmnt printed it; the Mounter port (mounter.ts) hands these out. */
export interface MountEntry {
  target: string;
  /** As findmnt shows it: `/dev/sdb`, `server:/export/dir`, `devtmpfs[/sdb]` for a bound device node. */
  source: string;
  fstype: string;
  options: string[];
  /** Directory of the mounted filesystem that appears at target ("/" unless a subtree was bound). */
  fsroot: string;
  /** Device number of the mounted filesystem, `major:minor`. */
  majMin: string;
}

/** mountinfo escapes space, tab, newline and backslash in paths as \ooo. */
const unescape = (s: string): string =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));

function mergeOptions(vfs: string, sb: string): string[] {
  const v = vfs.split(',').filter(Boolean);
  const s = sb.split(',').filter(Boolean);
  const ro = v.includes('ro') || s.includes('ro');
  const rest = [...v, ...s].filter((o) => o !== 'ro' && o !== 'rw');
  return [ro ? 'ro' : 'rw', ...new Set(rest)];
}

/** Parses mountinfo text into entries in mount order; lines it cannot read are skipped. */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    // id parent maj:min root mountpoint options [optional fields…] - fstype source superoptions
    const sep = f.indexOf('-', 6);
    if (sep < 0 || f.length < sep + 3) continue;
    const fsroot = unescape(f[3] ?? '/');
    const source = unescape(f[sep + 2] ?? '');
    out.push({
      target: unescape(f[4] ?? ''),
      source: fsroot !== '/' ? `${source}[${fsroot}]` : source,
      fstype: f[sep + 1] ?? '',
      options: mergeOptions(f[5] ?? '', f[sep + 3] ?? ''),
      fsroot,
      majMin: f[2] ?? '',
    });
  }
  return out;
}
