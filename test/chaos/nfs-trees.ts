// The claim trees of the NFS snapshot chaos scenario, on the export's local disk: the sample tree
// of the integration tests (every kind of entry and odd attribute: tree-meta.ts) plus a bulk
// directory of small files, so a copy takes long enough for a kill to land inside it; atimes in
// the future, so reading a tree (a killed copy, the retry, this audit) never moves them (relatime
// updates an atime only when it is not newer than mtime and ctime, or older than a day); and the
// comparison of a copy with its source as the driver keeps it (symlink times aside: ganesha
// cannot set them, docs/snapshots.md).
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { buildTree, describeTree, settable, type EntryMeta } from '../integration/nfs/tree-meta.js';

const BULK = 120;
/** Atimes a year ahead, one per entry of the sample tree, one for the bulk files. */
const FUTURE = Math.floor(Date.now() / 1000) + 365 * 86400;

const touchAtime = (paths: string[], s: number, ns: number) =>
  execFileSync('touch', ['-h', '-a', '-d', `@${s}.${String(ns).padStart(9, '0')}`, ...paths]);

/** Sets atimes no read moves (future ones) on `rels` below `root`; the bulk files share one. */
function futureAtimes(root: string, rels: readonly string[]): void {
  const bulk = rels.filter((r) => r.startsWith('bulk/'));
  rels
    .filter((r) => !r.startsWith('bulk/'))
    .forEach((r, i) => touchAtime([path.join(root, r)], FUTURE + i, 100_000_000 + i));
  if (bulk.length)
    touchAtime(
      bulk.map((r) => path.join(root, r)),
      FUTURE - 1,
      7,
    );
}

/** Fills the (empty) claim directory `root` with the scenario's tree. */
export async function buildSource(root: string): Promise<void> {
  await buildTree(root);
  fs.mkdirSync(path.join(root, 'bulk'));
  for (let i = 0; i < BULK; i++)
    fs.writeFileSync(path.join(root, 'bulk', `f-${String(i).padStart(3, '0')}`), randomBytes(512 + i * 13));
  futureAtimes(root, ['', ...(await describeTree(root)).map((e) => e.path)]);
}

/** What a pod would change after the snapshot: one file's content (and so its hard links), a mode, a new file. */
export function changeSource(root: string): void {
  fs.appendFileSync(path.join(root, 'a/hello.txt'), 'changed after the snapshot\n');
  fs.chmodSync(path.join(root, 'secret'), 0o640);
  fs.writeFileSync(path.join(root, 'after-snapshot.txt'), 'new');
  futureAtimes(root, ['after-snapshot.txt']);
}

/** The tree with its root, as the driver keeps it. */
export async function manifest(root: string): Promise<EntryMeta[]> {
  return settable(await describeTree(root, true));
}

/** The first differences between two manifests (at most `max`), for a violation's text. */
export function differences(want: readonly EntryMeta[], got: readonly EntryMeta[], max = 4): string[] {
  const by = new Map(got.map((e) => [e.path, e]));
  const out: string[] = [];
  for (const w of want) {
    const g = by.get(w.path);
    if (!g) out.push(`${w.path || '.'} missing`);
    else {
      const keys = (Object.keys(w) as (keyof EntryMeta)[]).filter((k) => JSON.stringify(w[k]) !== JSON.stringify(g[k]));
      if (keys.length)
        out.push(`${w.path || '.'}: ${keys.map((k) => `${k} ${String(g[k])} (want ${String(w[k])})`).join(', ')}`);
    }
    by.delete(w.path);
  }
  for (const extra of by.keys()) out.push(`${extra} is extra`);
  return out.slice(0, max);
}

/** Entries below `dir` on the local disk (0 when it does not exist): how far a copy got. */
export function countEntries(dir: string): number {
  let n = 0;
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    n++;
    if (e.isDirectory()) n += countEntries(path.join(dir, e.name));
  }
  return n;
}
