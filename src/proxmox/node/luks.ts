// LUKS encryption of Proxmox volumes, compatible with proxmox-csi-plugin: a volume is encrypted
// when its StorageClass names a node-stage Secret holding `encryption-passphrase`; kubelet then
// hands that Secret to NodeStageVolume (and, through node-expand-secret, to NodeExpandVolume).
//
// How the node knows a volume must be encrypted even when the passphrase is missing: the
// external-provisioner strips every csi.storage.k8s.io/* parameter before CreateVolume, so the
// controller never learns that a class names a node-stage Secret and cannot mark the volume.
// What does reach the node: kubelet refuses to stage a PV whose nodeStageSecretRef names a
// Secret it cannot read, so a named Secret arrives as a non-empty `secrets` map. Therefore:
//   - any node-stage secret present  -> the volume must be encrypted; no `encryption-passphrase`
//     in it is an error, never a plain disk;
//   - `encrypted: "true"` in the volume context (our StorageClass parameter) -> the same, which
//     also covers a named Secret that is empty;
//   - a disk that already carries a LUKS header is never mounted or formatted without its key.
import { createHash } from 'node:crypto';
import { FailedPrecondition, InvalidArgument } from '../../errors.js';
import { type CryptMapping, LuksBusy, LuksKeyRejected } from '../../os/cryptsetup.js';
import type { ProxmoxNodeDeps } from './deps.js';
import { ciGet } from '../../node/common.js';
import { boolSpelling } from '../../csi/param-def.js';
import { VOLUME_CONTEXT_ENCRYPTED } from '../contract.js';

/** The Secret key upstream reads the passphrase from. */
export const ENCRYPTION_PASSPHRASE_KEY = 'encryption-passphrase';
/** Volume context key (from our StorageClass parameter) that demands encryption. */
/** blkid's TYPE for a LUKS header. */
export const LUKS_FS_TYPE = 'crypto_LUKS';

export type EncryptionRequest = { required: false } | { required: true; passphrase: string };

/** What the request says about encryption; throws when it demands it without a usable key. */
export function encryptionOf(
  secrets: Record<string, string> | undefined | null,
  volumeContext: Record<string, string> | undefined | null,
  volumeId: string,
): EncryptionRequest {
  const s = secrets ?? {};
  const passphrase = s[ENCRYPTION_PASSPHRASE_KEY];
  const marker = (ciGet(volumeContext ?? undefined, VOLUME_CONTEXT_ENCRYPTED) ?? '').trim().toLowerCase();
  // The spellings the controller accepts (csi/param-def.ts), in any case.
  if (marker && boolSpelling(marker) === undefined) {
    throw new InvalidArgument(
      `volume ${volumeId}: volume context ${VOLUME_CONTEXT_ENCRYPTED}=${JSON.stringify(marker)} must be "true" or "false"`,
    );
  }
  const keys = Object.keys(s);
  const required = passphrase !== undefined || keys.length > 0 || boolSpelling(marker) === true;
  if (!required) return { required: false };
  if (passphrase === undefined) {
    const why =
      keys.length > 0
        ? `its node-stage secret has keys ${keys.map((k) => JSON.stringify(k)).join(', ')} but`
        : 'the volume is marked encrypted but its node-stage secret has';
    throw new FailedPrecondition(
      `volume ${volumeId} must be LUKS-encrypted: ${why} no ${JSON.stringify(ENCRYPTION_PASSPHRASE_KEY)}; ` +
        `add that key to the Secret named by the StorageClass's csi.storage.k8s.io/node-stage-secret-name. Refusing to stage it unencrypted`,
    );
  }
  if (passphrase === '') {
    throw new InvalidArgument(
      `volume ${volumeId}: the node-stage secret's ${JSON.stringify(ENCRYPTION_PASSPHRASE_KEY)} is empty`,
    );
  }
  return { required: true, passphrase };
}

/**
 * dm name of the volume's mapping. Derived from the volume id alone, so an unstage that lost its
 * mount (kill -9 between umount and close) still finds it; the disk name keeps it readable, the
 * hash keeps same-named disks of two storages apart. Upstream names it `<kernel name>-encrypted`
 * (sdb-encrypted): such a mapping is found through the disk's holders instead.
 */
export function mapperName(volumeId: string): string {
  const disk = volumeId.split('/').pop() ?? volumeId;
  const safe = disk.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 80);
  const hash = createHash('sha256').update(volumeId).digest('hex').slice(0, 8);
  return `${safe}-${hash}-encrypted`;
}

/** Is the mapping mounted anywhere on this node (an open count sysfs does not show)? */
async function mounted(d: ProxmoxNodeDeps, m: CryptMapping): Promise<boolean> {
  return (await d.mounter.list()).some((e) => e.majMin === m.majMin);
}

/**
 * The open crypt mapping of `device`, opening it (and LUKS-formatting an empty disk first, when
 * `formatIfEmpty`) as needed. Every step looks before it acts, so a retry after a crash at any
 * line resumes where the last attempt stopped.
 */
export async function openEncrypted(
  d: ProxmoxNodeDeps,
  o: {
    device: string;
    volumeId: string;
    passphrase: string;
    probedType: string | undefined;
    mayFormat: boolean;
    log: { info(o: object, m: string): void };
  },
): Promise<CryptMapping> {
  const { device, volumeId, passphrase } = o;
  const open = (await d.cryptsetup.holdersOf(device))[0];
  if (open) return open;

  if (o.probedType === undefined) {
    if (!o.mayFormat) {
      throw new FailedPrecondition(
        `volume ${volumeId}: disk ${device} is empty and the access mode is read-only, so it cannot be encrypted`,
      );
    }
    o.log.info({ volumeId, device }, 'LUKS-formatting empty disk');
    await d.cryptsetup.format(device, passphrase);
  } else if (o.probedType !== LUKS_FS_TYPE) {
    throw new FailedPrecondition(
      `volume ${volumeId} must be encrypted, but disk ${device} already holds a plain ${o.probedType} filesystem; ` +
        'existing data is never encrypted in place. Copy it to a new encrypted volume, or stage this one without a node-stage secret',
    );
  }

  const name = mapperName(volumeId);
  const stale = await d.cryptsetup.byName(name);
  if (stale) {
    // Our name, on another device: what is left after the disk went away without an unstage.
    if (stale.inUse || (await mounted(d, stale))) {
      throw new FailedPrecondition(
        `volume ${volumeId}: the mapping ${name} is still in use on ${stale.backingNames.join(', ') || 'a device that is gone'}; unmount it first`,
      );
    }
    o.log.info({ volumeId, name, backing: stale.backingNames }, 'closing a leftover mapping of this volume');
    await d.cryptsetup.close(name);
  }
  try {
    return await d.cryptsetup.open(device, name, passphrase);
  } catch (e) {
    if (e instanceof LuksBusy || (await d.cryptsetup.keyslots(device)) !== 0) throw luksError(e, volumeId);
    if (!o.mayFormat) {
      throw new FailedPrecondition(
        `volume ${volumeId}: the LUKS header on ${device} has no key slot (its first stage was interrupted) and the access mode is read-only; ` +
          'stage it read-write once to finish formatting it',
      );
    }
  }
  // A header without a single key slot opens for nobody, so nothing was ever written through it:
  // the previous stage was killed inside luksFormat. Finish the job.
  o.log.info({ volumeId, device }, 'LUKS header has no key slot (interrupted format); formatting again');
  await d.cryptsetup.format(device, passphrase);
  try {
    return await d.cryptsetup.open(device, name, passphrase);
  } catch (e) {
    throw luksError(e, volumeId);
  }
}

/** Close the volume's mapping if nothing uses it any more. */
export async function closeEncrypted(
  d: ProxmoxNodeDeps,
  m: CryptMapping,
  volumeId: string,
  log: { info(o: object, m: string): void; warn(o: object, m: string): void },
): Promise<void> {
  if (m.inUse || (await mounted(d, m))) {
    log.warn({ volumeId, name: m.name }, 'LUKS mapping still in use elsewhere; left open');
    return;
  }
  try {
    await d.cryptsetup.close(m.name);
  } catch (e) {
    throw luksError(e, volumeId);
  }
  log.info({ volumeId, name: m.name }, 'LUKS mapping closed');
}

export function luksError(e: unknown, volumeId: string): unknown {
  if (e instanceof LuksKeyRejected) {
    return new InvalidArgument(
      `volume ${volumeId}: the node-stage secret's ${JSON.stringify(ENCRYPTION_PASSPHRASE_KEY)} does not open this LUKS volume (${e.message}); ` +
        'check that the Secret holds the passphrase the volume was formatted with',
      { cause: e },
    );
  }
  if (e instanceof LuksBusy) return new FailedPrecondition(`volume ${volumeId}: ${e.message}`, { cause: e });
  return e;
}
