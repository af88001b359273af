// LUKS-encrypted Proxmox volumes against fakes of the disk and cryptsetup ports: when encryption
// is demanded, that a plain disk is never the outcome, idempotency across crashes between steps,
// and where the passphrase may go (stdin only). The real thing runs in the VM tier (test/vm/luks.ts).
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { createProxmoxNode } from '../../../../src/proxmox/node/node.js';
import { encryptionOf, mapperName } from '../../../../src/proxmox/node/luks.js';
import { isCsiError } from '../../../../src/errors.js';
import { parseCreateParameters, volumeContextOf } from '../../../../src/proxmox/controller/params/params.js';
import { redact } from '../../../../src/server/redact.js';
import { createLinuxMounter } from '../../../../src/os/mounter.js';
import { createLinuxCryptsetup, LuksKeyRejected, parseStatusSpan } from '../../../../src/os/cryptsetup.js';
import { CommandError, type Exec, type ExecOptions } from '../../../../src/os/exec.js';
import type { CallContext, VolumeCapability } from '../../../../src/csi/types.js';
import { FakeSystem, parseMount } from '../../os/fakes.js';
import { FakeDisks } from './fake-disks.js';
import { FakeCryptsetup } from './fake-cryptsetup.js';
import { rejection } from '../../../helpers/rejection.js';
import { NODE_METHODS, implemented } from '../../../helpers/implemented.js';
import { present } from '../../../helpers/present.js';

const WWN3 = '5056432d49443033';
const VOL = 'homelab/hyper1/local-lvm/vm-9999-pvc-0b1c';
const PASS = 'correct horse battery staple\n';
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);
const cap = (mode = 'SINGLE_NODE_WRITER', block = false): VolumeCapability =>
  (block
    ? { block: {}, accessMode: { mode } }
    : { mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode } }) as VolumeCapability;

function setup(t: { teardown(fn: () => void): void }) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'pve-luks-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const lines: string[] = [];
  const log = pino(
    { level: 'debug' },
    new Writable({
      write(c, _e, cb) {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const ctx: CallContext = { log, signal: new AbortController().signal };
  const sys = new FakeSystem();
  const disks = new FakeDisks();
  const luks = new FakeCryptsetup(disks);
  disks.add(WWN3, '/dev/sdc', '8:32');
  // Mounts get the device number of what was mounted, as the kernel would show them.
  sys.intercept((cmd, args) => {
    if (cmd !== 'mount' || args[0] !== '-t') return undefined;
    const m = parseMount(args);
    if (!m) return undefined;
    const d = disks.byDevice(m.source);
    sys.addMount({ target: m.target, source: m.source, fstype: m.fstype, majMin: d ? d.majMin : '0:1' });
    return Promise.resolve({ stdout: '', stderr: '', exitCode: 0 });
  });
  const node = implemented(
    createProxmoxNode({
      nodeId: 'talos-w1',
      log,
      exec: sys,
      mounter: createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo }),
      blockDevices: disks,
      cryptsetup: luks,
      nodeLabels: null,
      deviceWaitMs: 200,
      kubeletDir: dir,
    }),
    NODE_METHODS,
  );
  const staging = path.join(dir, 'staging');
  const stage = (extra: Record<string, unknown> = {}) =>
    node.nodeStageVolume(
      {
        volumeId: VOL,
        publishContext: { DevicePath: `/dev/disk/by-id/wwn-0x${WWN3}`, lun: '3' },
        stagingTargetPath: staging,
        volumeCapability: cap(),
        secrets: { 'encryption-passphrase': PASS },
        volumeContext: {},
        ...extra,
      },
      ctx,
    );
  const unstage = () => node.nodeUnstageVolume({ volumeId: VOL, stagingTargetPath: staging }, ctx);
  const mountedAtStaging = () => sys.table.filter((m) => m.target === staging);
  return { dir, sys, disks, luks, node, stage, unstage, staging, mountedAtStaging, lines, ctx };
}

t.test('what demands encryption: a passphrase, any node-stage secret, or the encrypted marker', async (t) => {
  t.same(encryptionOf({}, {}, 'v'), { required: false });
  t.same(encryptionOf(undefined, { encrypted: 'false' }, 'v'), { required: false });
  t.same(encryptionOf({ 'encryption-passphrase': 'p' }, {}, 'v'), { required: true, passphrase: 'p' });
  t.throws(() => encryptionOf({ password: 'x' }, {}, 'v1'), {
    kind: 'FailedPrecondition',
    message: /v1 must be LUKS-encrypted.*"password".*no "encryption-passphrase".*Refusing to stage it unencrypted/,
  });
  t.throws(() => encryptionOf({}, { encrypted: 'true' }, 'v1'), {
    kind: 'FailedPrecondition',
    message: /marked encrypted/,
  });
  t.throws(() => encryptionOf({ 'encryption-passphrase': '' }, {}, 'v1'), {
    kind: 'InvalidArgument',
    message: /is empty/,
  });
  t.throws(() => encryptionOf({}, { encrypted: 'yes' }, 'v1'), {
    kind: 'InvalidArgument',
    message: /"true" or "false"/,
  });
});

t.test('the encrypted StorageClass parameter reaches the node through the volume context', async (t) => {
  t.doesNotThrow(() => parseCreateParameters({ storage: 'local-lvm', encrypted: 'true' }));
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', encrypted: 'yes' }), /parameter "encrypted"/);
  const vc = volumeContextOf({ storage: 'local-lvm', encrypted: 'True' });
  t.equal(vc.encrypted, 'True');
  t.throws(
    () => encryptionOf({}, vc, 'v1'),
    { kind: 'FailedPrecondition', message: /marked encrypted/ },
    'and demands a passphrase there',
  );
  t.same(encryptionOf({}, { encrypted: '0' }, 'v1'), { required: false });
});

t.test('the request log redacts the passphrase of stage and expand requests', async (t) => {
  for (const type of ['NodeStageVolumeRequest', 'NodeExpandVolumeRequest']) {
    t.notMatch(
      JSON.stringify(redact(type, { volumeId: VOL, secrets: { 'encryption-passphrase': PASS } })),
      /horse/,
      type,
    );
  }
});

t.test('mapper names: stable per volume, distinct per storage, valid dm names', async (t) => {
  t.equal(mapperName(VOL), mapperName(VOL));
  t.not(mapperName(VOL), mapperName(VOL.replace('local-lvm', 'local-zfs')));
  t.match(mapperName(VOL), /^vm-9999-pvc-0b1c-[0-9a-f]{8}-encrypted$/);
  t.ok(mapperName(`a/b/c/${'x'.repeat(300)}`).length < 128);
});

t.test('first stage: LUKS header on the empty disk, filesystem on the mapping, mapping mounted', async (t) => {
  const { luks, disks, stage, mountedAtStaging } = setup(t);
  await stage();
  const name = mapperName(VOL);
  t.same(luks.calls, ['format /dev/sdc', `open /dev/sdc ${name}`]);
  t.same(disks.formats, [[`/dev/mapper/${name}`, 'ext4', {}]], 'mkfs ran on the mapping, never on the disk');
  t.same(
    mountedAtStaging().map((m) => m.source),
    [`/dev/mapper/${name}`],
  );
  await stage();
  t.equal(luks.calls.length, 2, 'a repeated stage changes nothing');
  t.equal(mountedAtStaging().length, 1);
});

t.test('unstage closes the mapping; restage opens the header again and keeps the filesystem', async (t) => {
  const { luks, disks, stage, unstage, mountedAtStaging } = setup(t);
  await stage();
  await unstage();
  t.equal(mountedAtStaging().length, 0);
  t.equal(luks.mappings.size, 0, 'mapping closed');
  await unstage();
  await stage();
  t.same(
    luks.calls.filter((c) => c.startsWith('format')),
    ['format /dev/sdc'],
    'formatted once',
  );
  t.equal(disks.formats.length, 1, 'mkfs once');
});

t.test('a crash between any two steps resumes without formatting twice', async (t) => {
  const { luks, disks, stage, unstage, mountedAtStaging } = setup(t);
  luks.failNext.open = new Error('killed after luksFormat');
  await t.rejects(stage());
  await stage();
  t.same(luks.calls.filter((c) => c.startsWith('format')).length, 1, 'header written once');

  await unstage();
  // Crash after open, before mkfs: the open mapping is reused, mkfs runs on it.
  const fresh = setup(t);
  const realFormat = fresh.disks.format.bind(fresh.disks);
  let first = true;
  fresh.disks.format = async (...a) => {
    if (first) {
      first = false;
      throw new Error('killed before mkfs');
    }
    return realFormat(...a);
  };
  await t.rejects(fresh.stage());
  t.equal(fresh.luks.mappings.size, 1, 'mapping left open by the crash');
  await fresh.stage();
  t.same(fresh.luks.calls.filter((c) => c.startsWith('open')).length, 1, 'the open mapping was reused');
  t.equal(fresh.mountedAtStaging().length, 1);

  // Crash between umount and close: the retry finds the mapping by name.
  fresh.luks.failNext.close = new Error('killed before close');
  await t.rejects(fresh.unstage());
  t.equal(fresh.mountedAtStaging().length, 0);
  t.equal(fresh.luks.mappings.size, 1);
  await fresh.unstage();
  t.equal(fresh.luks.mappings.size, 0, 'closed by the retry');
  t.equal(disks.formats.length, 1);
  t.equal(mountedAtStaging().length, 0);
});

t.test('a header without a key slot (luksFormat killed during argon2) is formatted again', async (t) => {
  const s = setup(t);
  s.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' }; // header written, no key slot yet
  await s.stage();
  t.same(s.luks.calls, ['open /dev/sdc ' + mapperName(VOL), 'format /dev/sdc', 'open /dev/sdc ' + mapperName(VOL)]);
  t.equal(s.mountedAtStaging().length, 1);

  const ro = setup(t);
  ro.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  const roErr = await rejection(ro.stage({ volumeCapability: cap('SINGLE_NODE_READER_ONLY') }));
  t.equal(code(roErr), 'FailedPrecondition', 'read-only: reported, not formatted');
  t.match(roErr.message, /no key slot .* stage it read-write once/);
  t.same(
    ro.luks.calls.filter((c) => c.startsWith('format')),
    [],
  );

  const keyed = setup(t);
  keyed.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  keyed.luks.keys.set('/dev/sdc', 'other');
  t.equal(code(await rejection(keyed.stage())), 'InvalidArgument');
  t.same(
    keyed.luks.calls.filter((c) => c.startsWith('format')),
    [],
    'a header with a key slot is never formatted again',
  );
});

t.test('stats: abnormal when the disk under an open mapping is gone', async (t) => {
  const s = setup(t);
  await s.stage();
  const req = { volumeId: VOL, volumePath: s.staging, stagingTargetPath: '' };
  t.equal((await s.node.nodeGetVolumeStats(req, s.ctx)).volumeCondition?.abnormal, false);
  s.disks.gone.add('8:32');
  const r = await s.node.nodeGetVolumeStats(req, s.ctx);
  t.equal(r.volumeCondition?.abnormal, true);
  t.match(r.volumeCondition?.message, /disk under the LUKS mapping .* no longer attached/);
});

t.test('wrong passphrase: InvalidArgument saying so, nothing formatted or mounted', async (t) => {
  const s2 = setup(t);
  s2.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  s2.luks.keys.set('/dev/sdc', PASS);
  const err = await rejection(s2.stage({ secrets: { 'encryption-passphrase': 'wrong' } }));
  t.equal(code(err), 'InvalidArgument');
  t.match(err.message, /encryption-passphrase" does not open this LUKS volume/);
  t.notMatch(err.message, /wrong|correct horse/, 'the message names no passphrase');
  t.same(
    s2.luks.calls.filter((c) => c.startsWith('format')),
    [],
  );
  t.same(s2.disks.formats, []);
  t.equal(s2.mountedAtStaging().length, 0);
  await s2.stage({ secrets: { 'encryption-passphrase': PASS } });
  t.equal(s2.mountedAtStaging().length, 1, 'the right one opens it');
  t.notMatch(s2.lines.join(''), /correct horse|wrong/, 'no passphrase in any log line');
});

t.test('never a plain disk when encryption is demanded, never a LUKS disk mounted without its key', async (t) => {
  const plain = setup(t);
  plain.disks.disk(WWN3).probe = { fsType: 'ext4' };
  const e1 = await rejection(plain.stage());
  t.equal(code(e1), 'FailedPrecondition');
  t.match(e1.message, /plain ext4 filesystem; existing data is never encrypted in place/);
  t.same(plain.luks.calls, [], 'no luksFormat over a filesystem');

  const noKey = setup(t);
  const e2 = await rejection(noKey.stage({ secrets: { username: 'x' } }));
  t.equal(code(e2), 'FailedPrecondition');
  t.same(noKey.luks.calls, []);
  t.same(noKey.disks.formats, [], 'no mkfs on the bare disk');
  t.equal(noKey.mountedAtStaging().length, 0);

  const marker = setup(t);
  t.equal(
    code(await rejection(marker.stage({ secrets: {}, volumeContext: { encrypted: 'true' } }))),
    'FailedPrecondition',
  );
  t.same(marker.disks.formats, []);

  const luksNoSecret = setup(t);
  luksNoSecret.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  const e3 = await rejection(luksNoSecret.stage({ secrets: {} }));
  t.equal(code(e3), 'FailedPrecondition');
  t.match(e3.message, /LUKS-encrypted, but the request carries no node-stage secret/);
  t.equal(luksNoSecret.mountedAtStaging().length, 0);

  const block = setup(t);
  const e4 = await rejection(block.stage({ volumeCapability: cap('SINGLE_NODE_WRITER', true) }));
  t.equal(code(e4), 'InvalidArgument');
  t.match(e4.message, /filesystem volumes only/);

  const ro = setup(t);
  t.equal(code(await rejection(ro.stage({ volumeCapability: cap('SINGLE_NODE_READER_ONLY') }))), 'FailedPrecondition');
  t.same(ro.luks.calls, [], 'a read-only stage never writes a header');
});

t.test('a leftover mapping of this volume on a vanished disk is closed; one in use is not touched', async (t) => {
  const s = setup(t);
  s.disks.add('old', '/dev/sdb', '8:16', { fsType: 'crypto_LUKS' });
  s.luks.keys.set('/dev/sdb', PASS);
  await s.luks.open('/dev/sdb', mapperName(VOL), PASS);
  s.disks.devices.delete('old');
  s.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  s.luks.keys.set('/dev/sdc', PASS);
  await s.stage();
  t.same(s.luks.calls.slice(-2), [`close ${mapperName(VOL)}`, `open /dev/sdc ${mapperName(VOL)}`]);

  const busy = setup(t);
  busy.disks.add('old', '/dev/sdb', '8:16', { fsType: 'crypto_LUKS' });
  busy.luks.keys.set('/dev/sdb', PASS);
  await busy.luks.open('/dev/sdb', mapperName(VOL), PASS);
  present(busy.luks.mappings.get(mapperName(VOL)), 'the mapping').inUse = true;
  busy.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  busy.luks.keys.set('/dev/sdc', PASS);
  const err = await rejection(busy.stage());
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /still in use on sdb/);
});

t.test('upstream-named mapping (sdc-encrypted) mounted at staging: stage accepts it, unstage closes it', async (t) => {
  const s = setup(t);
  s.disks.disk(WWN3).probe = { fsType: 'crypto_LUKS' };
  s.luks.keys.set('/dev/sdc', PASS);
  s.luks.inner.set('/dev/sdc', { fsType: 'ext4' });
  const m = await s.luks.open('/dev/sdc', 'sdc-encrypted', PASS);
  s.sys.addMount({ target: s.staging, source: m.device, fstype: 'ext4', majMin: m.majMin });
  await s.stage();
  t.same(s.luks.calls, ['open /dev/sdc sdc-encrypted'], 'nothing reopened');
  await s.unstage();
  t.equal(s.luks.mappings.size, 0);
  t.equal(s.mountedAtStaging().length, 0);
});

t.test('expand: disk, then mapping (with the node-expand passphrase), then filesystem on the mapping', async (t) => {
  const s = setup(t);
  await s.stage();
  const grows: string[] = [];
  s.disks.resizeFs = async (...a: unknown[]) => {
    grows.push(String(a[0]));
  };
  s.luks.spans.set(mapperName(VOL), (1 << 30) - (16 << 20)); // opened before the disk grew
  s.disks.disk(WWN3).size = 2 ** 31;
  const req = {
    volumeId: VOL,
    volumePath: s.staging,
    capacityRange: { requiredBytes: String(2 ** 31), limitBytes: '0' },
    stagingTargetPath: '',
    volumeCapability: null,
  };
  const r = await s.node.nodeExpandVolume({ ...req, secrets: { 'encryption-passphrase': PASS } }, s.ctx);
  t.equal(Number(r.capacityBytes), 2 ** 31);
  t.same(s.luks.resizes, [[mapperName(VOL), PASS]]);
  t.same(grows, [`/dev/mapper/${mapperName(VOL)}`]);
  s.luks.spans.set(mapperName(VOL), (1 << 30) - (16 << 20));
  const err = await rejection(s.node.nodeExpandVolume({ ...req, secrets: {} }, s.ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /node-expand-secret-name/);

  // Offline expansion: the disk grew while detached, the next open spans all of it already;
  // kubelet's NodeExpandVolume then needs no passphrase.
  s.luks.spans.delete(mapperName(VOL));
  grows.length = 0;
  await s.node.nodeExpandVolume({ ...req, secrets: {} }, s.ctx);
  t.equal(s.luks.resizes.length, 1, 'no cryptsetup resize');
  t.same(grows, [`/dev/mapper/${mapperName(VOL)}`], 'the filesystem still grows');
});

t.test('cryptsetup status: data offset and size in bytes', async (t) => {
  const out = `/dev/mapper/x is active and is in use.
  type:    LUKS2
  cipher:  aes-xts-plain64
  keysize: 512 bits
  key location: keyring
  device:  /dev/sda
  sector size:  512
  offset:  32768 sectors
  size:    2064384 sectors
  mode:    read/write`;
  t.same(parseStatusSpan(out), { offset: 16 << 20, size: 2064384 * 512 });
  t.equal(parseStatusSpan('/dev/mapper/x is inactive.'), undefined);
});

// The adapter: argv, stdin and exit codes of the real cryptsetup command lines.
class RecordingExec implements Exec {
  calls: Array<{ file: string; args: readonly string[]; opts: ExecOptions }> = [];
  exitCode = 0;
  async run(file: string, args: readonly string[], opts: ExecOptions = {}) {
    this.calls.push({ file, args, opts });
    if (this.exitCode)
      throw new CommandError({
        command: file,
        args,
        reason: 'exit',
        exitCode: this.exitCode,
        stderr: 'No key available with this passphrase.',
      });
    return { stdout: '', stderr: '', exitCode: 0 };
  }
}

t.test('adapter: upstream layout, passphrase on stdin only, exit 2 is a rejected key', async (t) => {
  const exec = new RecordingExec();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-luks-sys-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const c = createLinuxCryptsetup({ exec, sysfsRoot: dir });
  await c.format('/dev/sdc', PASS);
  t.same(exec.calls[0]?.args, [
    'luksFormat',
    '--batch-mode',
    '--type',
    'luks2',
    '--cipher',
    'aes-xts-plain64',
    '--key-size=512',
    '--key-file=-',
    '/dev/sdc',
  ]);
  t.equal(exec.calls[0]?.opts.input, PASS, 'the passphrase goes to stdin, byte for byte');
  await c.resize('m', PASS);
  t.same(exec.calls[1]?.args, ['resize', '--key-file=-', 'm']);
  await c.resize('m');
  t.same(exec.calls[2]?.args, ['resize', 'm']);
  t.equal(exec.calls[2]?.opts.input, undefined);
  for (const call of exec.calls)
    t.notOk(
      call.args.some((a) => a.includes('horse')),
      'never in argv',
    );
  exec.exitCode = 2;
  await t.rejects(c.open('/dev/sdc', 'm', 'bad'), LuksKeyRejected);
  await c.close('not-open'); // nothing in sysfs: success without running cryptsetup
  t.equal(exec.calls.filter((x) => x.args[0] === 'close').length, 0);
});

t.test('adapter: mappings read from sysfs (holders, name, uuid, slaves)', async (t) => {
  const sys = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-luks-sys-'));
  const dev = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-luks-dev-'));
  t.teardown(() => {
    fs.rmSync(sys, { recursive: true, force: true });
    fs.rmSync(dev, { recursive: true, force: true });
  });
  // The sysfs tree: a string is a file's content, `-> x` a symlink to x.
  const tree: Record<string, string> = {
    'block/sdc/dev': '8:32\n',
    'block/sdc/holders/dm-0': '-> ../../dm-0',
    'block/dm-0/dev': '254:0\n',
    'block/dm-0/dm/name': 'vol-encrypted\n',
    'block/dm-0/dm/uuid': 'CRYPT-LUKS2-0123456789abcdef0123456789abcdef-vol-encrypted\n',
    'block/dm-0/slaves/sdc': '-> ../../sdc',
    'block/dm-1/dev': '254:1\n',
    'block/dm-1/dm/name': 'lvm-thing\n',
    'block/dm-1/dm/uuid': 'LVM-abc\n',
    'dev/block/254:0': '-> ../../block/dm-0',
    'dev/block/254:1': '-> ../../block/dm-1',
  };
  for (const [p, v] of Object.entries(tree)) {
    const at = path.join(sys, p);
    fs.mkdirSync(path.dirname(at), { recursive: true });
    if (v.startsWith('-> ')) fs.symlinkSync(v.slice(3), at);
    else fs.writeFileSync(at, v);
  }
  fs.writeFileSync(path.join(dev, 'sdc'), '');
  const c = createLinuxCryptsetup({ exec: new RecordingExec(), sysfsRoot: sys, devRoot: dev });
  const want = {
    name: 'vol-encrypted',
    device: path.join(dev, 'dm-0'),
    majMin: '254:0',
    backing: ['8:32'],
    backingNames: ['sdc'],
    inUse: false,
  };
  t.same(await c.holdersOf(path.join(dev, 'sdc')), [want]);
  t.same(await c.byName('vol-encrypted'), want);
  t.same(await c.byMajMin('254:0'), want);
  t.equal(await c.byMajMin('254:1'), undefined, 'an LVM mapping is not a crypt mapping');
  t.equal(await c.byName('lvm-thing'), undefined);
  t.equal(await c.byMajMin('8:32'), undefined);
});
