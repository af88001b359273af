// What the NFS ownership property tests generate and what they check, shared by the unit run
// (a fake NAS) and the integration run (ganesha): handles in every form the driver parses, and
// the invariant — a call changes nothing outside the one claim directory its handle names (and
// that claim's archive target and the empty parents between them and the share), and nothing at
// all when the share is not inside an export or the path goes through a link or another file
// system.
import fc from 'fast-check';

export const POLICIES = ['delete', 'retain', 'archive', ''] as const;

/** A handle as a user might write one, from a share and a subDir (both without slashes around). */
export interface HandleCase {
  server: string;
  share: string;
  subDir: string;
  form: 'hash5' | 'hash3' | 'legacy' | 'legacy-slashes' | 'hash-slashes';
  policy: (typeof POLICIES)[number];
}

export function volumeId(h: HandleCase): string {
  switch (h.form) {
    case 'hash5':
      return `${h.server}#${h.share}#${h.subDir}#pv-x#${h.policy}`;
    case 'hash3':
      return `${h.server}#${h.share}#${h.subDir}`;
    case 'hash-slashes':
      return `${h.server}#/${h.share}/#/${h.subDir}/#pv-x#${h.policy}`;
    case 'legacy':
      return `${h.server}/${h.share}/${h.subDir}`;
    case 'legacy-slashes':
      return `${h.server}//${h.share}//${h.subDir}`;
  }
}

/** Path segments: names of the layouts, a new name, and the awkward ones. */
export const segment = (names: readonly string[]) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...names) },
    { weight: 1, arbitrary: fc.constantFrom('new', '.', '..', '', 'archived-ns', 'a b') },
  );

export const handleCase = (server: string, shares: readonly string[], names: readonly string[]) =>
  fc.record<HandleCase>({
    server: fc.constant(server),
    share: fc.constantFrom(...shares),
    subDir: fc.array(segment(names), { minLength: 1, maxLength: 3 }).map((s) => s.join('/')),
    form: fc.constantFrom('hash5', 'hash3', 'legacy', 'legacy-slashes', 'hash-slashes'),
    policy: fc.constantFrom(...POLICIES),
  });

export type Step = { kind: 'create' | 'delete'; h: HandleCase };

export const steps = (server: string, shares: readonly string[], names: readonly string[], max = 3) =>
  fc.array(fc.record<Step>({ kind: fc.constantFrom('create', 'delete'), h: handleCase(server, shares, names) }), {
    minLength: 1,
    maxLength: max,
  });

/**
 * PBT_SEED and PBT_RUNS from the environment, so a longer run and a replay are possible. Without
 * PBT_SEED the run starts from a fixed seed, so `npm test` is reproducible; PBT_SEED=random (and
 * `npm run pbt`) searches new ones; each counterexample found became a named test.
 */
export function pbtParams(defaultRuns: number): { seed: number; numRuns: number } {
  const env = process.env.PBT_SEED;
  const seed = env === 'random' ? Date.now() % 2 ** 31 : env ? Number(env) : 1;
  const numRuns = process.env.PBT_RUNS ? Number(process.env.PBT_RUNS) : defaultRuns;
  return { seed, numRuns };
}

const STAMP = '-\\d{8}T\\d{6}Z(?:-\\d+)?';
const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Whether `rel` (relative to the share) may change in a call on claim `subDir`: the claim or
 * below it, its archive target (archived-<first>/<rest>[-<UTC>[-n]]) or below, or an empty
 * parent of either strictly below the share.
 */
export function claimMayChange(subDir: string, rel: string, type: string): boolean {
  const segs = subDir.split('/');
  const r = rel.split('/');
  const under = (base: string[]) => base.every((s, i) => r[i] === s);
  if (r.length >= segs.length && under(segs)) return r.length > segs.length || type === 'dir';
  const [first = '', ...rest] = segs;
  const archive = new RegExp(
    `^archived-${esc(first)}${rest.length ? '' : `(?:${STAMP})?`}` +
      rest.map((s, i) => `/${esc(s)}${i === rest.length - 1 ? `(?:${STAMP})?` : ''}`).join('') +
      '(?:/.*)?$',
  );
  if (archive.test(rel)) return true;
  // Parents the driver makes or removes on the way (always directories).
  const parentOf = (base: string[]) => r.length < base.length && under(base.slice(0, r.length));
  return type === 'dir' && (parentOf(segs) || parentOf([`archived-${first}`, ...rest]));
}

/** A change list of two pictures keyed by object identity: the paths that went, came or moved. */
export function changedPaths<T extends { path: string; type: string }>(
  before: Map<number | string, T>,
  after: Map<number | string, T>,
): T[] {
  const out: T[] = [];
  for (const [id, b] of before) {
    const a = after.get(id);
    if (!a) out.push(b);
    else if (a.path !== b.path) out.push(b, a);
  }
  for (const [id, a] of after) if (!before.has(id)) out.push(a);
  return out;
}
