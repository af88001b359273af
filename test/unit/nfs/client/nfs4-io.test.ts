// XDR of the NFSv4.1 operations the tree copy adds (RFC 8881, RFC 7530 §5): SETATTR's fattr4
// with owners and client times in attribute order, OPEN's reply with each kind of delegation
// answer (what follows it must still decode), and the copy's attributes read back exactly.
import t from 'tap';
import { A, readFattr, writeFattr } from '../../../../src/nfs/client/nfs4.js';
import { COPY_ATTRS, io } from '../../../../src/nfs/client/nfs4-io.js';
import { XdrReader, XdrWriter } from '../../../../src/nfs/client/xdr.js';

t.test('fattr4 to set: mode, owner, group, atime, mtime in attribute order', async (t) => {
  const w = new XdrWriter();
  writeFattr(w, {
    mode: 0o4755,
    owner: '1000',
    group: '2000',
    atime: { sec: -5, nsec: 7 },
    mtime: { sec: 1, nsec: 2 },
  });
  const r = new XdrReader(w.bytes());
  t.equal(r.u32(), 2, 'two bitmap words');
  t.equal(r.u32(), 0);
  t.equal(
    r.u32(),
    ((1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 22)) >>> 0,
    'mode 33, owner 36, group 37, time_access_set 48, time_modify_set 54',
  );
  const v = new XdrReader(r.opaque());
  t.equal(v.u32(), 0o4755);
  t.equal(v.string(), '1000');
  t.equal(v.string(), '2000');
  t.equal(v.u32(), 1, 'SET_TO_CLIENT_TIME4');
  t.equal(BigInt.asIntN(64, v.u64()), -5n, 'seconds before 1970 stay negative');
  t.equal(v.u32(), 7);
  t.equal(v.u32(), 1);
  t.equal(v.u64(), 1n);
  t.equal(v.u32(), 2);
});

function openReply(delegation: (w: XdrWriter) => void): XdrReader {
  const w = new XdrWriter();
  w.fixed(Buffer.alloc(16, 1)); // stateid
  w.bool(true).u64(1n).u64(2n); // change_info4
  w.u32(0); // rflags
  w.u32(1).u32(0); // attrset
  delegation(w);
  w.u32(0xcafe); // what follows the OPEN result
  return new XdrReader(w.bytes());
}

t.test('OPEN reply: no delegation, none with a reason, read and write delegations', async (t) => {
  const read = io.create({ clientid: 1n, owner: Buffer.from('o') }, 'f', {}).read;
  if (!read) throw new Error('OPEN has a reply body');
  const ace = (w: XdrWriter) => w.u32(0).u32(0).u32(0).string('EVERYONE@');
  const cases: [string, (w: XdrWriter) => void, boolean][] = [
    ['none', (w) => w.u32(0), false],
    ['none_ext, contention', (w) => w.u32(3).u32(1).bool(false), false],
    ['none_ext, not wanted', (w) => w.u32(3).u32(0), false],
    ['read', (w) => ace(w.u32(1).fixed(Buffer.alloc(16, 9)).bool(false)), true],
    ['write, size limit', (w) => ace(w.u32(2).fixed(Buffer.alloc(16, 9)).bool(false).u32(1).u64(99n)), true],
    ['write, block limit', (w) => ace(w.u32(2).fixed(Buffer.alloc(16, 9)).bool(false).u32(2).u32(4).u32(512)), true],
  ];
  for (const [name, deleg, granted] of cases) {
    const r = openReply(deleg);
    const o = read(r);
    t.same(o.stateid, Buffer.alloc(16, 1), `${name}: open stateid`);
    t.same(o.delegation, granted ? Buffer.alloc(16, 9) : undefined, `${name}: delegation to return`);
    t.equal(r.u32(), 0xcafe, `${name}: the next result decodes`);
  }
});

t.test('the copy attributes decode exactly, nanoseconds and device numbers included', async (t) => {
  const vals = new XdrWriter();
  vals.u32(4); // type: chr
  vals.u64(0n); // size
  vals.u64(3n).u64(4n); // fsid
  vals.opaque(Buffer.from('fh')); // filehandle
  vals.u64(77n); // fileid
  vals.u32(0o2750); // mode
  vals.u32(3); // numlinks
  vals.string('1000').string('users@example');
  vals.u32(5).u32(9); // rawdev
  vals.u64(BigInt.asUintN(64, -1n)).u32(999_999_999); // time_access
  vals.u64(1_600_000_000n).u32(123_456_789); // time_modify
  vals.u64(77n); // mounted_on_fileid
  const bits = [0, 0];
  for (const a of COPY_ATTRS) bits[a >> 5] = ((bits[a >> 5] ?? 0) | (1 << (a & 31))) >>> 0;
  const w = new XdrWriter()
    .u32(2)
    .u32(bits[0] ?? 0)
    .u32(bits[1] ?? 0)
    .opaque(vals.bytes());
  const a = readFattr(new XdrReader(w.bytes()));
  t.match(a, {
    type: 'char',
    fsid: '3:4',
    fileid: 77n,
    mode: 0o2750,
    numlinks: 3,
    owner: '1000',
    group: 'users@example',
    rawdev: { major: 5, minor: 9 },
    atime: { sec: -1, nsec: 999_999_999 },
    mtime: { sec: 1_600_000_000, nsec: 123_456_789 },
    mountedOnFileid: 77n,
  });
  t.same(a.filehandle, Buffer.from('fh'));
  t.ok(COPY_ATTRS.includes(A.TIME_ACCESS) && COPY_ATTRS.includes(A.FILEHANDLE));
});
