// Where an NFS StorageClass puts its claims and archives, and how one path on its share relates
// to that layout. Pure: the day-2 ownership rule (ownership.ts, docs/ownership-day2.md) judges a
// directory against every class whose share covers it with these relations.
//
// A template segment becomes two expressions: what the class could have made (Kubernetes names:
// used to see that a path belongs to a class's layout, which blocks the other classes), and what
// proves the provisioner made it. Only a PV name proves anything: external-provisioner names a
// provisioned PV pvc-<uid of the claim> (its default --volume-name-prefix), which nobody types by
// hand; a namespace or a claim name is any DNS label, as `photos/2023` or `backups/nightly` are.
// A class without subDir names the directory after the PV, so its claims are exactly the
// top-level pvc-<uid> directories (and nothing else on its share is in its layout).
import { ARCHIVE_PREFIX } from '../../nfs/controller/archives.js';

const UID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const DNS_LABEL = '[a-z0-9]([-a-z0-9]*[a-z0-9])?';
const DNS_SUBDOMAIN = '[a-z0-9]([-a-z0-9.]*[a-z0-9])?';
const STAMP_RE = /-\d{8}T\d{6}Z(?:-\d+)?$/;

/** Per template variable: [could have made, proves the provisioner made it]. */
const VARIABLES: Record<string, readonly [string, string | undefined]> = {
  'pvc.metadata.namespace': [DNS_LABEL, undefined],
  'pvc.metadata.name': [DNS_SUBDOMAIN, undefined],
  'pv.metadata.name': [`pvc-${UID}`, `pvc-${UID}`],
};
const PV_NAME_TEMPLATE = '${pv.metadata.name}';

export interface Layout {
  /** The subDir template as the class gives it (the PV name when none). */
  template: string;
  /** Per segment: a name this class could have made. */
  could: RegExp[];
  /** Per segment: a name that proves a provisioned claim; undefined when the template cannot. */
  proof: RegExp[] | undefined;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function segmentRe(segment: string, pick: 0 | 1): { re: RegExp; proves: boolean } {
  let re = '';
  let rest = segment;
  let proves = false;
  for (const m of segment.matchAll(/\$\{(?<name>[^}]*)\}/g)) {
    const at = rest.indexOf(m[0]);
    const v = VARIABLES[m.groups?.name ?? ''];
    const proof = v?.[1];
    if (pick === 1 && proof) proves = true;
    re += escape(rest.slice(0, at)) + (pick === 1 ? (proof ?? v?.[0] ?? '[^/]+') : (v?.[0] ?? '[^/]+'));
    rest = rest.slice(at + m[0].length);
  }
  return { re: new RegExp(`^${re}${escape(rest)}$`), proves };
}

/** The layout of a class with this subDir parameter (undefined or empty: none). */
export function layoutOf(subDir: string | undefined): Layout {
  const template = (subDir ?? '').replace(/^\/+|\/+$/g, '') || PV_NAME_TEMPLATE;
  const segments = template.split('/').filter((s) => s !== '');
  const proof = segments.map((s) => segmentRe(s, 1));
  return {
    template,
    could: segments.map((s) => segmentRe(s, 0).re),
    proof: proof.some((p) => p.proves) ? proof.map((p) => p.re) : undefined,
  };
}

/**
 * How a path relative to a class's share relates to its layout:
 *   claim / claim-parent / inside-claim: the class could have made it as a claim directory, as a
 *     directory above claims (a namespace), or it lies inside one of its claims;
 *   archive / archive-parent / inside-archive: the same for its archives (archived-<subDir>, the
 *     last segment with an optional -<UTC stamp>[-n]); a path under a top-level archived-* is
 *     never a claim (the drivers' own scans skip those);
 *   share: the path is the share itself (or above it: rel undefined);
 *   unrelated: nothing of this class can be there.
 */
export type Relation =
  'claim' | 'claim-parent' | 'inside-claim' | 'archive' | 'archive-parent' | 'inside-archive' | 'share' | 'unrelated';

function fits(segs: readonly string[], res: readonly RegExp[], stampLast: boolean): boolean {
  return segs.every((s, i) => {
    const re = res[i];
    if (!re) return false;
    if (re.test(s)) return true;
    return stampLast && i === res.length - 1 && re.test(s.replace(STAMP_RE, ''));
  });
}

function relationOf(segs: readonly string[], res: readonly RegExp[], archive: boolean): Relation {
  const m = res.length;
  const head = segs.slice(0, m);
  if (!fits(head, res, archive)) return 'unrelated';
  if (segs.length < m) return archive ? 'archive-parent' : 'claim-parent';
  if (segs.length === m) return archive ? 'archive' : 'claim';
  return archive ? 'inside-archive' : 'inside-claim';
}

export function relate(layout: Layout, rel: string | undefined): Relation {
  if (rel === undefined || rel === '') return 'share';
  const segs = rel.split('/');
  const first = segs[0] ?? '';
  if (first.startsWith(ARCHIVE_PREFIX)) {
    const inner = [first.slice(ARCHIVE_PREFIX.length), ...segs.slice(1)];
    return inner[0] === '' ? 'unrelated' : relationOf(inner, layout.could, true);
  }
  return relationOf(segs, layout.could, false);
}

/** Whether a claim-shaped path carries a name that proves the provisioner made it. */
export function proves(layout: Layout, rel: string): boolean {
  return (
    layout.proof !== undefined &&
    fits(rel.split('/'), layout.proof, false) &&
    rel.split('/').length === layout.proof.length
  );
}
