// Every StorageClass key proxmox-csi-plugin v0.19.1 reads is accepted with its meaning where it
// applies to LVM-thin, refused with the reason where it cannot; unknown keys are refused by name.
// Old PVs carry upstream's normalised volume context (StorageParameters.ToMap: bools as "0"/"1",
// replicate always present): it must give the same drive line as the StorageClass spelling.
import t from 'tap';
import { isCsiError } from '../../../src/errors.js';
import {
  driveOptionsFromContext,
  driveString,
  parseCreateParameters,
  volumeContextOf,
} from '../../../src/proxmox/controller/params/params.js';
import { wwnForSlot } from '../../../src/proxmox/contract.js';
import { PROXMOX_PARAMETERS } from '../../../src/proxmox/param-keys.js';
import { present } from '../../helpers/present.js';
import { PROXMOX_EXAMPLES } from '../../helpers/storage-class-examples.js';

const UPSTREAM_KEYS = [
  'storage',
  'storageFormat',
  'aio',
  'backup',
  'cache',
  'iothread',
  'ssd',
  'diskIOPS',
  'diskMBps',
  'blockSize',
  'inodeSize',
  'replicate',
  'replicateSchedule',
  'replicateZones',
  'resizeRequired',
  'resizeSizeBytes',
];

function refusal(p: Record<string, string>): string {
  try {
    parseCreateParameters(p);
  } catch (e) {
    if (isCsiError(e, 'InvalidArgument')) return e.message;
    throw e;
  }
  return 'accepted';
}

t.test('every upstream key is a known key', async (t) => {
  for (const k of UPSTREAM_KEYS) t.ok(k in PROXMOX_PARAMETERS, k);
});

t.test('accepted with their meaning', async (t) => {
  // every key, with other spellings than the examples where upstream allows them
  const p = parseCreateParameters({
    ...PROXMOX_EXAMPLES,
    aio: 'io_uring',
    backup: 'true',
    iothread: 'false',
    ssd: '1',
    diskIOPS: '500',
    diskMBps: '50',
  });
  t.match(p, {
    storage: 'local-lvm',
    aio: 'io_uring',
    backup: true,
    cache: 'none',
    iothread: false,
    ssd: true,
    diskIOPS: 500,
    diskMBps: 50,
    blockSize: 4096,
    inodeSize: 256,
    fsType: 'xfs',
  });
  const line = driveString(
    'local-lvm',
    'vm-9999-pvc-a',
    driveOptionsFromContext({ storage: 'local-lvm', aio: 'native', cache: 'none' }, false),
    wwnForSlot(1),
  );
  t.equal(
    line,
    'local-lvm:vm-9999-pvc-a,aio=native,backup=0,cache=none,iothread=1,wwn=0x5056432d49443031',
    'aio reaches the drive line',
  );
});

t.test('refused with key and reason where LVM-thin cannot', async (t) => {
  const base = { storage: 'local-lvm' };
  // qcow2 parses; whether the storage can hold it is decided once its type is known (storage/kinds.ts)
  t.equal(parseCreateParameters({ ...base, storageFormat: 'qcow2' }).format, 'qcow2');
  t.match(refusal({ ...base, storageFormat: 'vmdk' }), /"storageFormat": "vmdk" is not valid; expected raw, qcow2/);
  t.match(
    refusal({ ...base, replicate: 'true' }),
    /"replicate": zone replication .* is not offered by this driver yet/,
  );
  t.match(
    refusal({ ...base, replicate: '1', replicateSchedule: '*/5', replicateZones: 'hyper1,hyper2' }),
    /"replicate"/,
  );
  t.match(
    refusal({ ...base, resizeRequired: 'true' }),
    /"resizeRequired": upstream sets it only on volumes restored from a snapshot/,
  );
  t.match(refusal({ ...base, resizeSizeBytes: '10737418240' }), /"resizeSizeBytes": "10737418240" cannot be used/);
  t.match(refusal({ ...base, aio: 'posix' }), /"aio": "posix" is not valid; expected native, threads, io_uring/);
  t.match(refusal({ ...base, diskIOPS: 'fast' }), /"diskIOPS"/);
  t.match(
    refusal({ ...base, replicateShedule: '*/5' }),
    /parameter "replicateShedule" is not known/,
    'a misspelt key is refused by name',
  );
  t.equal(refusal({ ...base, 'csi.storage.k8s.io/pvc/name': 'x' }), 'accepted', "the provisioner's keys");
});

/** What upstream returned as volume_context for these StorageClass parameters (StorageParameters.ToMap). */
function upstreamContext(sc: Record<string, string>): Record<string, string> {
  const b = (v: string | undefined, d: boolean) =>
    (v === undefined ? d : ['1', 't', 'T', 'true', 'TRUE', 'True'].includes(v)) ? '1' : '0';
  const out: Record<string, string> = {
    storage: present(sc.storage, 'the storage parameter'),
    backup: b(sc.backup, false),
    iothread: b(sc.iothread, true),
    replicate: b(sc.replicate, false),
  };
  for (const k of ['storageFormat', 'aio', 'cache', 'replicateSchedule', 'replicateZones']) {
    const v = sc[k];
    if (v) out[k] = v;
  }
  if (sc.ssd !== undefined) out.ssd = b(sc.ssd, false);
  for (const k of ['diskIOPS', 'diskMBps', 'blockSize', 'inodeSize'])
    if (sc[k] && sc[k] !== '0') out[k] = String(Number(sc[k]));
  return out;
}

t.test("old PVs' normalised volume context drives the same drive line as the StorageClass spelling", async (t) => {
  const classes: Record<string, string>[] = [
    { storage: 'local-lvm', ssd: 'true', backup: 'true', cache: 'writethrough' }, // the seed's proxmox-local
    { storage: 'local-lvm' },
    { storage: 'local-lvm', ssd: 'false', backup: 'False', iothread: 'false', diskIOPS: '1000', diskMBps: '100' },
    {
      storage: 'local-lvm',
      aio: 'native',
      cache: 'none',
      ssd: 'T',
      blockSize: '4096',
      inodeSize: '512',
      storageFormat: 'raw',
    },
  ];
  for (const sc of classes) {
    parseCreateParameters(sc);
    const ctxNew = volumeContextOf({ ...sc, 'csi.storage.k8s.io/pv/name': 'pvc-1' });
    const ctxOld = {
      ...upstreamContext(sc),
      'storage.kubernetes.io/csiProvisionerIdentity': '1712345678901-8081-csi.proxmox.sinextra.dev',
    };
    for (const ro of [false, true]) {
      const fromNew = driveString('local-lvm', 'vm-9999-pvc-1', driveOptionsFromContext(ctxNew, ro), wwnForSlot(3));
      const fromOld = driveString('local-lvm', 'vm-9999-pvc-1', driveOptionsFromContext(ctxOld, ro), wwnForSlot(3));
      t.equal(fromOld, fromNew, `${JSON.stringify(ctxOld)} ro=${ro}`);
    }
  }
  t.equal(
    driveString(
      'local-lvm',
      'vm-9999-pvc-1',
      driveOptionsFromContext(
        { storage: 'local-lvm', backup: '1', ssd: '1', iothread: '1', replicate: '0', cache: 'writethrough' },
        false,
      ),
      wwnForSlot(1),
    ),
    'local-lvm:vm-9999-pvc-1,backup=1,cache=writethrough,discard=on,iothread=1,ssd=1,wwn=0x5056432d49443031',
    'the seed PV: backup "1", ssd "1", replicate "0"',
  );
  t.doesNotThrow(
    () =>
      driveOptionsFromContext(
        {
          storage: 'local-lvm',
          storageFormat: 'qcow2',
          replicate: '0',
          resizeRequired: '1',
          resizeSizeBytes: '1073741824',
        },
        false,
      ),
    'a PV context is never refused for keys that only matter at creation',
  );
});
