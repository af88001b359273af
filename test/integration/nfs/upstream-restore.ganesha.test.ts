// Restoring a csi-driver-nfs snapshot through the controller against a real nfs-ganesha, NFSv3
// and NFSv4-only: an archive made the way csi-driver-nfs makes it (`tar -C <claim> -czvf
// <baseDir>/<name>/<src>.tar.gz .`, its handle `server#baseDir#name#name#src`) is unpacked into
// the new claim with what the archive records (mode, owner, group, mtime, symlinks, hard links,
// FIFOs); a PAX archive's nanosecond times are kept; a plain .tar restores too; hostile archives
// are INVALID_ARGUMENT and nothing lands outside the claim.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createGzip } from 'node:zlib';
import { pino } from 'pino';
import tar from 'tar-stream';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import { createNfsController } from '../../../src/nfs/controller/controller.js';
import { implemented } from '../../helpers/implemented.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';
import { outcomeText } from '../../helpers/outcome.js';
import { type EntryMeta, buildTree, describeTree, settable } from './tree-meta.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

/** What a GNU-format archive records: mtime to the second, no atime (the restore sets it to the mtime). */
const toSeconds = (meta: readonly EntryMeta[]) =>
  settable(meta).map((e) => {
    if (e.type === 'symlink') return e;
    const s = (BigInt(e.mtimeNs) / 1_000_000_000n) * 1_000_000_000n;
    return { ...e, mtimeNs: String(s), atimeNs: String(s) };
  });

type Entry = Partial<tar.Header> & { name: string };

/** A hostile archive: the given entries, gzipped. */
async function hostile(file: string, entries: Entry[]): Promise<void> {
  const pack = tar.pack();
  const gz = createGzip();
  const chunks: Buffer[] = [];
  gz.on('data', (c: Buffer) => chunks.push(c));
  const done = new Promise((r) => gz.on('end', r));
  pack.pipe(gz);
  for (const e of entries) {
    if (e.type === 'file' || !e.type) pack.entry(e, 'x');
    else pack.entry(e);
  }
  pack.finalize();
  await done;
  await fs.writeFile(file, Buffer.concat(chunks));
}

for (const v4only of [false, true]) {
  t.test(v4only ? 'NFSv4-only server' : 'NFSv3 server', async (t) => {
    const { g, talos: TALOS, onDisk } = await startTalosExport(t, { v4only });
    const c = implemented(
      createNfsController({
        log: pino({ level: 'silent' }),
        callTimeoutMs: 5000,
        nfsPort: g.nfsPort,
        mountPort: g.mountPort,
      }),
      ['createSnapshot', 'deleteSnapshot', 'listSnapshots'],
    );
    t.teardown(() => c.close());
    const handle = (name: string) => `${g.server}#${TALOS.slice(1)}#${name}#${name}#pvc-src`;
    const restore = (pvc: string, name: string) => {
      const req: CreateVolumeRequest = {
        name: pvc,
        // an archive unpacks at most the requested capacity: room for the source tree's files
        capacityRange: { requiredBytes: String(64 << 20), limitBytes: '0' },
        volumeCapabilities: [cap as unknown as VolumeCapability],
        parameters: { server: g.server, share: TALOS },
        secrets: {},
        volumeContentSource: { snapshot: { snapshotId: handle(name) } },
        accessibilityRequirements: null,
        mutableParameters: {},
      };
      return c.createVolume(req, ctx);
    };
    const src = await fs.mkdtemp(path.join(os.tmpdir(), 'upstream-src-'));
    t.teardown(() => fs.rm(src, { recursive: true, force: true }));
    await buildTree(src);
    await fs.chmod(src, 0o2775);
    await fs.chown(src, 1000, 2000);
    const want = await describeTree(src, true);

    await t.test('a tar.gz made as csi-driver-nfs makes it', async (t) => {
      await fs.mkdir(onDisk('snapshot-gz'));
      execFileSync('tar', ['-C', src, '-czvf', onDisk('snapshot-gz/pvc-src.tar.gz'), '.'], { stdio: 'ignore' });
      await restore('pvc-gz', 'snapshot-gz');
      t.same(toSeconds(await describeTree(onDisk('pvc-gz'), true)), toSeconds(want), 'what the archive records');
      t.same(
        await fs.readdir(onDisk('.snapshots')),
        ['.filled-pvc-gz@pvc-gz'],
        'no restore record left; its filled one',
      );
      await restore('pvc-gz', 'snapshot-gz');
      t.ok(await fs.stat(onDisk('snapshot-gz/pvc-src.tar.gz')), 'the archive is left as it was');
    });

    await t.test('a PAX .tar keeps nanosecond mtimes and atimes', async (t) => {
      await fs.mkdir(onDisk('snapshot-pax'));
      const now = await describeTree(src, true);
      execFileSync('tar', ['--format=posix', '-C', src, '-cf', onDisk('snapshot-pax/pvc-src.tar'), '.']);
      await restore('pvc-pax', 'snapshot-pax');
      const got = settable(await describeTree(onDisk('pvc-pax'), true));
      // tar reads each file before its header's atime is taken: compare atimes of what it does not read.
      const noFileAtimes = (m: EntryMeta[]) => m.map((e) => (e.type === 'file' ? { ...e, atimeNs: '-' } : e));
      t.same(noFileAtimes(got), noFileAtimes(settable(now)));
    });

    const bad: [string, Entry[], RegExp][] = [
      ['dotdot', [{ name: '../escaped' }], /steps out of the target/],
      ['absolute', [{ name: '/abs-file' }], /absolute path/],
      [
        'through-symlink',
        [{ name: 'ln', type: 'symlink', linkname: '..' }, { name: 'ln/escaped' }],
        /not a directory this archive made/,
      ],
      ['hardlink-out', [{ name: 'h', type: 'link', linkname: '../../etc/passwd' }], /steps out of the target/],
      [
        'hardlink-dir',
        [
          { name: 'd', type: 'directory' },
          { name: 'h', type: 'link', linkname: 'd' },
        ],
        /not a file this archive made/,
      ],
      ['twice', [{ name: 'f' }, { name: 'f' }], /already made/],
    ];
    for (const [name, entries, why] of bad) {
      await t.test(`hostile archive: ${name}`, async (t) => {
        await fs.mkdir(onDisk(`snapshot-${name}`));
        await hostile(onDisk(`snapshot-${name}/pvc-src.tar.gz`), entries);
        const before = (await fs.readdir(g.exportDir)).sort();
        t.match(
          await outcomeText(restore(`pvc-${name}`, `snapshot-${name}`)),
          new RegExp(`^InvalidArgument: .*${why.source}`),
        );
        t.same((await fs.readdir(g.exportDir)).sort(), before, 'nothing outside the share root changed');
        await t.rejects(fs.stat(onDisk('escaped')), 'nothing landed beside the claim');
        await t.rejects(fs.stat(path.join(g.exportDir, 'escaped')));
      });
    }

    await t.test('not an archive at all', async (t) => {
      await fs.mkdir(onDisk('snapshot-junk'));
      await fs.writeFile(onDisk('snapshot-junk/pvc-src.tar.gz'), Buffer.from([0x1f, 0x8b, 1, 2, 3, 4, 5]));
      t.match(
        await outcomeText(restore('pvc-junk', 'snapshot-junk')),
        /^InvalidArgument: archive .* not a readable tar/,
      );
    });
  });
}
