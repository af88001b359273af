// VM tier: the NFS tree copy (what CreateSnapshot, restore and clone run) against the guest's
// Linux nfsd, with and without NFSv4.2 server-side copy. Two exports: the NAS tmpfs (no reflink:
// nfsd answers CLONE with NOTSUPP, COPY copies inside the server) and an XFS with reflink on a
// loop file (CLONE shares the blocks). Each copy is checked byte for byte in the guest (cmp) and
// the figures are printed as a table: the controller's own READ/WRITE copy (NFSv4.1, what a class
// with `nfsvers=4.1` gets, and NFSv4.0 with its own OPEN state) against COPY and CLONE (NFSv4.2).
// Run by test/vm/tier.ts inside vm.sh.
import { createNfs4Stores } from '../../src/nfs/controller/store/nfs4-store.js';
import type { CopyStats } from '../../src/nfs/controller/copy/copy-tree.js';
import { guestShell, scenarioLog } from './scenario.js';
import { vmEnv } from './vm-env.js';

const { say, check, restart } = scenarioLog('server-copy');
const sh = guestShell(300_000);

/** One file of this size per tree: large enough that the bytes dominate, small enough for TCG. */
const MiB = 1024 * 1024;
const FILE_MIB = 64;
const ROUNDS = 3;

interface Row {
  fs: string;
  how: string;
  ms: number[];
  stats: CopyStats;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

export async function runServerCopy(): Promise<number> {
  restart();
  const server = vmEnv('VM_NFS_SERVER');
  const nfsPort = Number(vmEnv('VM_NFS_PORT'));
  const talos = vmEnv('VM_NFS_SHARE'); // on the tmpfs, at the same path in NFSv4's pseudo root
  const xfsDir = '/srv/nas/xfs';
  say('an XFS with reflink on a loop file, exported next to the tmpfs');
  await sh(
    [
      'set -e',
      'truncate -s 512M /srv/xfs.img',
      'mkfs.xfs -q -f -m reflink=1 /srv/xfs.img',
      `mkdir -p ${xfsDir}`,
      `mount -o loop /srv/xfs.img ${xfsDir}`,
      `exportfs -o rw,fsid=2,no_root_squash,no_subtree_check,insecure,sync '*:${xfsDir}'`,
    ].join('\n'),
  );
  const shares = [
    { fs: 'tmpfs', share: talos, local: talos },
    { fs: 'xfs (reflink)', share: '/xfs', local: xfsDir },
  ];
  const rows: Row[] = [];
  try {
    for (const s of shares) {
      await sh(
        `set -e; mkdir -p ${s.local}/sc-src/sub; head -c ${FILE_MIB * MiB} /dev/urandom >${s.local}/sc-src/sub/big; ` +
          `echo small >${s.local}/sc-src/small; chown -R 1000:1000 ${s.local}/sc-src`,
      );
      for (const [minor, how] of [
        [0, 'controller READ/WRITE (NFSv4.0)'],
        [1, 'controller READ/WRITE (NFSv4.1)'],
        [2, 'server-side (NFSv4.2)'],
      ] as const) {
        // NFSv4.0's OPEN state (SETCLIENTID, seqids, OPEN_CONFIRM) against the kernel's rules; the file system does not matter to it.
        if (minor === 0 && s.fs !== 'tmpfs') continue;
        const stores = createNfs4Stores({ timeoutMs: 120_000, nfsPort, minor });
        const store = stores.open(server, s.share);
        const row: Row = { fs: s.fs, how, ms: [], stats: {} as CopyStats };
        try {
          for (let i = 0; i < ROUNDS; i++) {
            const to = `sc-copy-${minor}-${i}`;
            const t0 = performance.now();
            row.stats = await store.copyTree('sc-src', to);
            row.ms.push(performance.now() - t0);
            await sh(
              `cmp ${s.local}/sc-src/sub/big ${s.local}/${to}/sub/big && cmp ${s.local}/sc-src/small ${s.local}/${to}/small && ` +
                `[ "$(stat -c %u:%g:%a ${s.local}/sc-src/sub/big)" = "$(stat -c %u:%g:%a ${s.local}/${to}/sub/big)" ]`,
            );
            await sh(`rm -rf ${s.local}/${to}`);
          }
        } finally {
          await stores.close();
        }
        const st = row.stats;
        check(st.files === 2 && st.bytes === FILE_MIB * MiB + 6, `${s.fs}, ${how}: both files copied, equal (cmp)`);
        const want =
          minor < 2
            ? { cloned: 0, serverCopied: 0 }
            : s.fs === 'tmpfs'
              ? { cloned: 0, serverCopied: 2 } // tmpfs cannot share blocks: nfsd copies them
              : { cloned: 2, serverCopied: 0 };
        check(
          st.cloned === want.cloned && st.serverCopied === want.serverCopied,
          `${s.fs}, ${how}: cloned ${st.cloned}, server-copied ${st.serverCopied} (want ${want.cloned}, ${want.serverCopied})`,
        );
        rows.push(row);
      }
      await sh(`rm -rf ${s.local}/sc-src`);
    }
  } finally {
    await sh(`exportfs -u '*:${xfsDir}'; umount ${xfsDir}; rm -f /srv/xfs.img; rmdir ${xfsDir}`).catch((e: unknown) =>
      say(`cleanup: ${String(e)}`),
    );
  }
  // The floor: a copy that passes through the controller moves every byte twice over the
  // link (READ in, WRITE out); a server-side one moves none, a clone writes no data at all.
  console.log(`\nNFS tree copy, ${FILE_MIB} MiB file + 1 small file, guest nfsd under TCG, median of ${ROUNDS}:`);
  console.log('| file system | copy | median | runs | MiB/s | bytes over the wire (floor) |');
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const r of rows) {
    const m = median(r.ms);
    const wire = r.stats.cloned + r.stats.serverCopied > 0 ? '≈ 0 (metadata only)' : `${2 * FILE_MIB} MiB`;
    console.log(
      `| ${r.fs} | ${r.how} | ${(m / 1000).toFixed(2)} s | ${r.ms.map((x) => (x / 1000).toFixed(2)).join(' / ')} | ` +
        `${(FILE_MIB / (m / 1000)).toFixed(0)} | ${wire} |`,
    );
  }
  return 0;
}
