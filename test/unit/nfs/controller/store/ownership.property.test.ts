// Property-based search for NFS ownership counterexamples over an in-memory NAS (fake-nas.ts):
// generated export layouts (v3, v4-only, v3+v4 speaking either, nested exports, the pseudo-root,
// symlinks to siblings, parents and "/", archives that are links) × generated handles (every
// form the driver parses, empty and dotted segments, parents of claims) × CreateVolume and
// DeleteVolume (delete, retain, archive). After every step: nothing outside the one claim
// directory (and its archive target) was created, renamed or deleted. The real controller,
// policies, ownership gate and tree walker run; only the NAS is simulated.
//   PBT_SEED=<n> replays a run; PBT_RUNS=<n> runs longer (default 300).
import t from 'tap';
import fc from 'fast-check';
import { pino } from 'pino';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import { parseVolumeId } from '../../../../../src/nfs/volume-id.js';
import { normaliseShare } from '../../../../../src/nfs/path-rules.js';
import { FakeNas, FakeNasStores } from '../fake-nas.js';
import { type Step, changedPaths, claimMayChange, pbtParams, steps, volumeId } from './ownership-model.js';

const SERVER = 'nas';
const EXPORT = '/volume1/k8s-volumes';

interface Layout {
  protocols: '3' | '4' | '3,4';
  speaks: '3' | '4';
  /**
   * Linux nfsd's v4root: pseudo nodes on the export's own file system report its fsid and no
   * junction (mounted_on_fileid = fileid); only ACCESS says they are read-only.
   */
  kernelPseudo: boolean;
  nested: boolean;
  /** Another disk mounted inside the export, exported by nothing (Linux nfsd with crossmnt). */
  mounted: boolean;
  sibling: boolean;
  links: Array<'link-sib' | 'link-parent' | 'link-root' | 'archived-media'>;
  extra: string[];
}

const layout = fc
  .record<Layout>({
    protocols: fc.constantFrom('3', '4', '3,4'),
    speaks: fc.constantFrom('3', '4'),
    kernelPseudo: fc.boolean(),
    nested: fc.boolean(),
    mounted: fc.boolean(),
    sibling: fc.boolean(),
    links: fc.subarray(['link-sib', 'link-parent', 'link-root', 'archived-media'] as const),
    extra: fc.subarray(['talos/ns/other', 'talos/media/app/db', 'talos/archived-ns/pvc/old', 'keep.txt']),
  })
  .map((l): Layout => ({ ...l, speaks: l.protocols === '3,4' ? l.speaks : l.protocols === '4' ? '4' : '3' }));

function build(l: Layout): FakeNas {
  const nas = new FakeNas(l.protocols, l.speaks, l.kernelPseudo ? 'fs1' : 'pseudo');
  nas.addExport(EXPORT, 'fs1', !l.kernelPseudo);
  for (const p of ['talos/ns/pvc/data', 'talos/media', 'photos/2023/img']) nas.put(`${EXPORT}/${p}`, 'dir');
  nas.put(`${EXPORT}/talos/ns/pvc/file.txt`, 'file');
  for (const p of l.extra) nas.put(`${EXPORT}/${p}`, p.endsWith('.txt') ? 'file' : 'dir');
  if (l.nested) {
    nas.addExport(`${EXPORT}/talos/nested`, 'fs2');
    nas.put(`${EXPORT}/talos/nested/ns/pvc/inner`, 'dir');
  }
  if (l.mounted) {
    nas.mount(`${EXPORT}/talos/media/disk`, 'fs4');
    nas.put(`${EXPORT}/talos/media/disk/f.txt`, 'file');
  }
  if (l.sibling) {
    nas.addExport('/volume2/other', 'fs3');
    nas.put('/volume2/other/ns/pvc', 'dir');
  }
  for (const s of l.links) nas.put(`${EXPORT}/talos/${s}`, 'symlink');
  return nas;
}

const SHARES = [
  '',
  'volume1',
  'volume1/k8s-volumes',
  'volume1/k8s-volumes/talos',
  'volume1/k8s-volumes/talos/ns',
  'volume1/k8s-volumes/talos/nested',
  'volume1/k8s-volumes/talos/link-sib',
  'volume2',
  'volume2/other',
];
const NAMES = ['volume1', 'k8s-volumes', 'talos', 'ns', 'pvc', 'media', 'nested', 'photos', 'data', 'file.txt'];
const LINKS = ['link-sib', 'link-parent', 'link-root', 'archived-media'];

/** Where a share may be changed at all: a directory inside an export, reached without a link. */
function shareFsid(nas: FakeNas, share: string): string | undefined {
  let n = nas.root;
  for (const s of share.split('/').filter(Boolean)) {
    const c = n.type === 'dir' ? n.children.get(s) : undefined;
    if (!c) return undefined;
    n = c;
  }
  return n.type === 'dir' && !n.pseudo ? n.fsid : undefined;
}

/** Runs one step and returns the violations of the invariant it caused. */
async function runStep(nas: FakeNas, step: Step, c: ReturnType<typeof createNfsController>): Promise<string[]> {
  const ctx = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
  const before = nas.picture();
  let target: { share: string; subDir: string } | undefined;
  if (step.kind === 'delete') {
    const id = volumeId(step.h);
    const ref = parseVolumeId(id);
    if (ref) target = ref;
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx).catch(() => undefined);
  } else {
    const params = { server: SERVER, share: step.h.share, subDir: step.h.subDir, onDelete: step.h.policy || 'delete' };
    try {
      // No subDir parameter: the claim is the PV name (what parseCreateParams does).
      target = { share: normaliseShare(step.h.share), subDir: step.h.subDir || 'pv-x' };
    } catch {
      target = undefined;
    }
    const req = {
      name: 'pv-x',
      capacityRange: { requiredBytes: '1', limitBytes: '0' },
      volumeCapabilities: [
        {
          mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
          accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' as const },
          accessType: 'mount' as const,
        },
      ],
      parameters: params,
      secrets: {},
      volumeContentSource: null,
      accessibilityRequirements: null,
      mutableParameters: {},
    };
    await c.createVolume(req, ctx).catch(() => undefined);
  }
  const changed = changedPaths(before, nas.picture());
  const fsid = target && shareFsid(nas, target.share);
  const shareAbs = target?.share.replace(/\/$/, '') ?? '';
  return changed
    .filter((x) => {
      if (!target || fsid === undefined || x.fsid !== fsid) return true;
      if (!x.path.startsWith(shareAbs + '/')) return true;
      return !claimMayChange(target.subDir, x.path.slice(shareAbs.length + 1), x.type);
    })
    .map((x) => `${step.kind} ${volumeId(step.h)}: ${x.type} ${x.path} changed`);
}

t.test('no generated layout, handle and call changes anything outside its one claim directory', async (t) => {
  const { seed, numRuns } = pbtParams(300);
  let cases = 0;
  let stepsRun = 0;
  const started = Date.now();
  const result = await fc.check(
    fc.asyncProperty(layout, steps(SERVER, SHARES, [...NAMES, ...LINKS]), async (l, ss) => {
      cases++;
      const nas = build(l);
      const c = createNfsController({
        log: pino({ level: 'silent' }),
        callTimeoutMs: 1000,
        stores: new FakeNasStores(new Map([[SERVER, nas]])),
        now: () => new Date('2026-07-01T00:00:00Z'),
      });
      for (const s of ss) {
        stepsRun++;
        const bad = await runStep(nas, s, c);
        if (bad.length) throw new Error(bad.join('\n'));
      }
    }),
    { seed, numRuns },
  );
  t.comment(
    `NFS ownership property: ${cases} cases, ${stepsRun} steps, seed ${seed} (replay: PBT_SEED=${seed}), ${Date.now() - started} ms`,
  );
  const why = result.errorInstance instanceof Error ? `\n${result.errorInstance.message}` : '';
  t.notOk(result.failed, (result.failed && `${fc.defaultReportMessage(result)}${why}`) || 'no counterexample');
});
