// VM tier: LUKS-encrypted Proxmox volumes with the guest's real dm-crypt and the host's
// cryptsetup. Format on first stage, data through the mapping, unstage closes it, restage opens it
// with the data intact, online growth through disk → mapping → filesystem, a wrong passphrase is
// a clear INVALID_ARGUMENT, and a volume LUKS-formatted the way proxmox-csi-plugin does it (its
// exact cryptsetup command lines, mapping sdX-encrypted, mkfs.ext4 on the mapping) opens with ours;
// a header left without key slots by an interrupted format is formatted again.
// Run by test/vm/tier.ts inside vm.sh.
import { GUEST_KUBELET_DIR } from './guest-paths.js';
import { GuestVolumes, type GuestVolume } from './guest-volumes.js';
import { guestShell, scenarioLog, type ScenarioDeps as Deps } from './scenario.js';
import { vmEnv } from './vm-env.js';
import { csiClient, type VolumeCapability } from '../helpers/csi-client.js';
import { present } from '../helpers/present.js';
import { rejection } from '../helpers/rejection.js';
import { parseStatusSpan } from '../../src/os/cryptsetup.js';

const GiB = 2 ** 30;
const NODE = 'talos-worker-1';
const PASS = 'e2e-passphrase-0b1c';
const { say, check, restart } = scenarioLog('luks');
const sh = guestShell(180_000);

/** Names of the open dm-crypt mappings in the guest. */
async function cryptMappings(): Promise<string[]> {
  const out = await sh(
    'for d in /sys/block/dm-*; do [ -e "$d/dm/uuid" ] && case "$(cat $d/dm/uuid)" in CRYPT-*) cat $d/dm/name;; esac; done; true',
  );
  return out.split('\n').filter(Boolean);
}

export async function runLuks(deps: Deps): Promise<number> {
  restart();
  const ctrl = await deps.startController('proxmox', deps.freshDir('vm-luks'));
  const c = csiClient(ctrl.endpoint, 300_000);
  const n = csiClient(vmEnv('VM_PROXMOX_ENDPOINT'), 300_000);
  const cap: VolumeCapability = { mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  const secrets = { 'encryption-passphrase': PASS };
  const staging = `${GUEST_KUBELET_DIR}/luks/staging`;
  const target = `${GUEST_KUBELET_DIR}/luks/target`;
  const vols = new GuestVolumes({
    c,
    n,
    nodeId: NODE,
    cap,
    staging,
    target,
    parameters: { storage: 'local-lvm' },
    say,
  });
  try {
    const create = async (name: string) => {
      const v = await vols.create(name);
      const pc = await vols.publish(v);
      const dev = await sh(`readlink -f ${present(pc.DevicePath, 'publishContext.DevicePath')}`);
      return { v, pc, dev };
    };
    type Published = { v: GuestVolume; pc: Record<string, string> };
    const stageReq = (x: Published, s: Record<string, string> = secrets) => ({
      volumeId: x.v.volumeId,
      publishContext: x.pc,
      stagingTargetPath: staging,
      volumeCapability: cap,
      volumeContext: x.v.volumeContext,
      secrets: s,
    });
    const mount = (x: Published) => vols.mount(x.v, x.pc, secrets);
    const unmount = (x: { v: GuestVolume }) => vols.unmount(x.v);
    const stagedSource = () => sh(`awk '$2 == "${staging}" {print $1}' /proc/mounts`);

    await sh(`mkdir -p ${staging}`);
    const a = await create('pvc-luks-a');
    let t = Date.now();
    await mount(a);
    say(`first stage (luksFormat + open + mkfs) took ${((Date.now() - t) / 1000).toFixed(1)} s`);
    check((await sh(`blkid -p -o value -s TYPE ${a.dev}`)) === 'crypto_LUKS', `${a.dev} carries a LUKS header`);
    const dump = await sh(`cryptsetup luksDump ${a.dev}`);
    check(
      /Version:\s*2/.test(dump) && /cipher:\s*aes-xts-plain64/.test(dump) && /Cipher key:\s*512 bits/.test(dump),
      'LUKS2, aes-xts-plain64, 512-bit key (upstream layout)',
    );
    check(
      (await stagedSource()).startsWith('/dev/mapper/') || (await stagedSource()).startsWith('/dev/dm-'),
      `the staged filesystem sits on the mapping (${await stagedSource()})`,
    );
    await sh(`echo "secret data" > ${target}/data.txt && sync`);
    await n.node.NodeStageVolume(stageReq(a));
    check(true, 'a repeated stage is accepted');
    await unmount(a);
    check((await cryptMappings()).length === 0, 'unstage closed the mapping');
    await n.node.NodeUnstageVolume({ volumeId: a.v.volumeId, stagingTargetPath: staging });
    check(true, 'a repeated unstage is accepted');

    t = Date.now();
    await mount(a);
    say(`restage (open) took ${((Date.now() - t) / 1000).toFixed(1)} s`);
    check((await sh(`cat ${target}/data.txt`)) === 'secret data', 'restage opened the volume with its data');

    const before = Number(await sh(`df -B1 --output=size ${target} | tail -1`));
    const exp = await c.controller.ControllerExpandVolume({
      volumeId: a.v.volumeId,
      capacityRange: { requiredBytes: 2 * GiB },
      volumeCapability: cap,
    });
    check(exp.nodeExpansionRequired, 'controller grew the disk online');
    await n.node.NodeExpandVolume({
      volumeId: a.v.volumeId,
      volumePath: target,
      stagingTargetPath: staging,
      capacityRange: { requiredBytes: 2 * GiB },
      volumeCapability: cap,
      secrets,
    });
    const after = Number(await sh(`df -B1 --output=size ${target} | tail -1`));
    check(
      after > before + 0.9 * GiB,
      `online growth through the mapping: ${(before / GiB).toFixed(2)} → ${(after / GiB).toFixed(2)} GiB`,
    );
    check((await sh(`cat ${target}/data.txt`)) === 'secret data', 'data intact after growing');
    const mapper = present((await stagedSource()).split('/').pop(), 'the staged mapping');
    const span = parseStatusSpan(await sh(`cryptsetup status ${mapper}`));
    check(
      span && span.offset + span.size === 2 * GiB,
      `the mapping spans the grown disk (cryptsetup status: offset ${span?.offset}, size ${span?.size})`,
    );
    await unmount(a);

    const wrong = await rejection(
      n.node.NodeStageVolume(stageReq(a, { 'encryption-passphrase': 'not-the-passphrase' })),
    );
    check(
      wrong.code === 3 && /does not open this LUKS volume/.test(wrong.details ?? ''),
      `wrong passphrase: INVALID_ARGUMENT "${(wrong.details ?? wrong.message).slice(0, 120)}…"`,
    );
    check(
      !(await stagedSource()) && (await cryptMappings()).length === 0,
      'nothing mounted or left open after the wrong passphrase',
    );
    const none = await rejection(n.node.NodeStageVolume(stageReq(a, {})));
    check(
      none.code === 9 && /LUKS-encrypted/.test(none.details ?? ''),
      'no secret for a LUKS disk: FAILED_PRECONDITION, nothing mounted',
    );
    check(!(await stagedSource()), 'still nothing mounted');

    // A volume formatted by proxmox-csi-plugin: its command lines (siderolabs/go-blockdevice
    // luks.Encrypt / Open / Close), its mapping name, mount-utils' mkfs.ext4.
    const b = await create('pvc-luks-upstream');
    const name = `${b.dev.split('/').pop()}-encrypted`;
    await sh(`cryptsetup luksFormat --type luks2 --key-file=- -c aes-xts-plain64 ${b.dev} --key-size=512`, PASS);
    await sh(`cryptsetup luksOpen ${b.dev} ${name} --key-file=-`, PASS);
    await sh(
      `mkfs.ext4 -F -m0 /dev/mapper/${name} >/dev/null 2>&1 && mkdir -p /run/luks/up && mount /dev/mapper/${name} /run/luks/up && echo "from upstream" > /run/luks/up/old.txt && umount /run/luks/up && cryptsetup luksClose ${name}`,
    );
    await mount(b);
    check(
      (await sh(`cat ${target}/old.txt`)) === 'from upstream',
      'a volume LUKS-formatted the way upstream does opens with ours, data intact',
    );
    await unmount(b);
    check((await cryptMappings()).length === 0, 'and closes');

    // What a stage killed inside luksFormat leaves: a header whose key slot was never written.
    await sh(`cryptsetup erase -q ${b.dev}`);
    t = Date.now();
    await mount(b);
    check(
      (await sh(`test -e ${target}/old.txt && echo old || echo fresh`)) === 'fresh',
      `a header without key slots is formatted again (${((Date.now() - t) / 1000).toFixed(1)} s)`,
    );
    check(/^\s+0: luks2$/m.test(await sh(`cryptsetup luksDump ${b.dev}`)), 'and has its key slot now');
    await unmount(b);
    say('LUKS scenario passed');
    return 0;
  } finally {
    await vols.close();
    await ctrl.stop();
  }
}
