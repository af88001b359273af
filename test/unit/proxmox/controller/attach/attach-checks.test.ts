// The attach queue's checks around a change on their own, against the fake Proxmox: the
// existence and exclusivity precheck, and the re-check after an exclusive attach landed —
// answered with the slot when no other VM has the disk, else withdrawn through the queue's
// detach and refused with what that withdrawal did.
import t from 'tap';
import pino from 'pino';
import { Unavailable } from '../../../../../src/errors.js';
import { type AttachJob, NEW_JOB } from '../../../../../src/proxmox/controller/attach/attach-jobs.js';
import type { AttachRequest, DetachRequest } from '../../../../../src/proxmox/controller/attach/attach-plan.js';
import { AttachChecks } from '../../../../../src/proxmox/controller/attach/attach-checks.js';
import { ContentCache } from '../../../../../src/proxmox/controller/state/content-cache.js';
import { DiskIndex } from '../../../../../src/proxmox/controller/state/disk-index.js';
import {
  GiB,
  HELPER_DRIVE_OPTIONS,
  driveOptionsFromContext,
  driveString,
} from '../../../../../src/proxmox/controller/params/params.js';
import { VmLocator, type VmRef } from '../../../../../src/proxmox/controller/state/vm-locator.js';
import { helperWwnForSlot, wwnForSlot } from '../../../../../src/proxmox/contract.js';
import { seedCluster } from '../../api/fake-api.js';

const WORKER1 = { vmid: 102, node: 'hyper1', name: 'talos-worker-1' };

function setup() {
  const f = seedCluster();
  const locator = new VmLocator(f, { cluster: 'homelab' });
  const index = new DiskIndex(f, locator);
  const content = new ContentCache(f, 5_000);
  const checks = new AttachChecks({
    index,
    content,
    log: pino({ level: 'silent' }),
    maxAgeMs: 5_000,
    confirmTimeoutMs: 300,
  });
  const vols = f.storageOf('hyper1', 'local-lvm').volumes;
  const req = (name: string, exclusive = true): AttachRequest => {
    vols.set(`vm-9999-${name}`, GiB);
    return {
      storage: 'local-lvm',
      disk: `vm-9999-${name}`,
      diskNode: 'hyper1',
      options: driveOptionsFromContext({}, false),
      exclusive,
    };
  };
  /** Puts the disk on VM 101 (talos-cp-1) as scsi1, as this driver would have. */
  const elsewhere = (r: AttachRequest, helper = false) =>
    f
      .vmOf(101)
      .config.set(
        'scsi1',
        helper
          ? driveString(r.storage, r.disk, HELPER_DRIVE_OPTIONS, helperWwnForSlot(1))
          : driveString(r.storage, r.disk, r.options, wwnForSlot(1)),
      );
  return { f, checks, req, elsewhere };
}

/** A job as the queue holds it, with its answer recorded. */
function job(req: AttachRequest, landedSlot?: number) {
  const answer: { slot?: number; err?: Error & { kind?: string } } = {};
  const j: AttachJob = {
    kind: 'attach',
    req,
    ...NEW_JOB,
    resolve(slot) {
      this.done = true;
      answer.slot = slot;
    },
    reject(e) {
      this.done = true;
      answer.err = e as Error;
    },
  };
  if (landedSlot !== undefined) j.landedSlot = landedSlot;
  return { j, answer };
}

t.test('precheck: a missing disk is NotFound, a disk another VM has is refused, the rest pass', async (t) => {
  const { f, checks, req, elsewhere } = setup();
  const held = req('pvc-held');
  elsewhere(held);
  const ok = job(req('pvc-ok'));
  const shared = job({ ...held, exclusive: false });
  const gone = job({ ...req('pvc-x'), disk: 'vm-9999-pvc-missing' });
  const taken = job(held);
  await checks.precheck(WORKER1, [ok.j, shared.j, gone.j, taken.j]);
  t.same([ok.j.done, shared.j.done], [false, false], 'an existing disk, and a shared one held elsewhere, go on');
  t.equal(gone.answer.err?.kind, 'NotFound');
  t.match(gone.answer.err?.message, /volume local-lvm:vm-9999-pvc-missing does not exist on hyper1/);
  t.equal(taken.answer.err?.kind, 'FailedPrecondition');
  t.match(taken.answer.err?.message, /attached as scsi1 of VM talos-cp-1 \(101\)/);
  t.ok(f.count('vmPending') > 0, 'the other VMs were read');
});

t.test('re-check: no other VM has the disk, the landed slot is the answer', async (t) => {
  const { checks, req } = setup();
  const landed = job(req('pvc-a'), 3);
  let withdrawn = 0;
  await checks.recheck(WORKER1, [landed.j], undefined, () => {
    withdrawn++;
    return Promise.resolve(undefined);
  });
  t.equal(landed.answer.slot, 3);
  t.equal(withdrawn, 0);
});

t.test('re-check: the disk appeared elsewhere, this attachment is withdrawn and refused', async (t) => {
  const { checks, req, elsewhere } = setup();
  const r = req('pvc-a');
  elsewhere(r);
  const asked: Array<[VmRef, DetachRequest]> = [];
  const refused = job(r, 2);
  await checks.recheck(WORKER1, [refused.j], undefined, (vm, d) => {
    asked.push([vm, d]);
    return Promise.resolve(undefined);
  });
  t.same(asked, [[WORKER1, { storage: 'local-lvm', disk: 'vm-9999-pvc-a' }]], 'withdrawn from this VM');
  t.equal(refused.answer.err?.kind, 'FailedPrecondition');
  t.match(
    refused.answer.err?.message,
    /appeared there while this attach to VM talos-worker-1 .* this one was withdrawn/,
  );

  const failed = job(r, 2);
  await checks.recheck(WORKER1, [failed.j], undefined, () => Promise.resolve(new Unavailable('socket hang up')));
  t.equal(failed.answer.err?.kind, 'Unavailable', 'a withdrawal that did not complete is retried later');
  t.match(
    failed.answer.err?.message,
    /was withdrawn but the unlink did not complete \(socket hang up\); retrying later/,
  );
});

t.test('re-check: a helper left over elsewhere makes the withdrawn publish ABORTED (retry)', async (t) => {
  const { checks, req, elsewhere } = setup();
  const r = req('pvc-a');
  elsewhere(r, true);
  const refused = job(r, 2);
  await checks.recheck(WORKER1, [refused.j], undefined, () => Promise.resolve(undefined));
  t.equal(refused.answer.err?.kind, 'Aborted');
  t.match(refused.answer.err?.message, /interrupted offline expansion/);
});
