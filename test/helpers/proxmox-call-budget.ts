// The fewest Proxmox API calls each CSI operation can make on its happy path (steady state,
// caches warm), shared by the unit test that fails on a regression (test/integration/
// proxmox/calls-per-op.test.ts) and the bench that prints calls next to them (bench/proxmox-grpc.ts).
//
// - CreateVolume 2: GET …/storage/{storage}/status, the thin-pool guard's fill read at decision
//   time (guests write into a pool faster than any cache TTL; a create judged on an older fill
//   over-fills it), then POST …/storage/{storage}/content (allocate). With the guard off
//   (--pool-guard=off) it is the POST alone. The storage content is read only when the
//   allocation says the name exists (or its answer was lost).
// - ControllerPublishVolume 3 + 1 per other VM on the disk's host (4 on the simulator's hyper1):
//   an exclusive attach reads every other VM of the host (GET …/pending each) at decision time,
//   since a disk attached there by hand leaves no task the post-landing re-check could find
//   (docs/ownership.md); then GET …/pending (config, pending changes and digest: slot plan,
//   the VM's own disks, hotplug), POST …/config with that digest, GET /nodes/{node}/tasks: this
//   change's task status (done, most of the time) and, in the same answer, every config change
//   another instance of the driver (same token) made on the host since the disk index was read
//   — exclusivity re-checked after landing without reading every VM.
// - ControllerUnpublishVolume 2: GET …/pending (which scsiN holds the disk now, the digest,
//   whether the VM hot-plugs disks), then the synchronous PUT …/config with `delete` and that
//   digest (what PUT …/unlink runs, in the form that takes a digest): a slot changed since the
//   read is refused, never detached. Its 200 is the verification on a VM that hot-plugs disks
//   (qemu-server unplugs, verifies the device left QEMU and drops the key, or answers 400
//   `hotplug problem`; attach-plan.ts unlinkVerified); other VMs are read back until the delete
//   left the pending section. The issue's 2 was "unlink, then read to confirm"; this is "read,
//   then the unlink that confirms itself" — the read must come first for the digest.
// - DeleteVolume 2 + 2 per VM on the disk's host (6 on the simulator's hyper1, 2 VMs): the
//   ownership gate frees only what no VM config key references in a read taken at decision time
//   (docs/ownership.md): GET /cluster/resources (the VM list, templates included), per VM GET
//   …/pending (config and pending section) and GET …/snapshot (snapshot sections; a VM without
//   snapshots needs no more), then DELETE …/content/{volume} with `delay` (answers when the free
//   task ended). It replaced the cached disk index plus GET /nodes/{node}/tasks (2 calls), which
//   missed a disk attached by hand within the cache TTL and every non-SCSI key.
export const PROXMOX_CALL_BUDGET = {
  CreateVolume: 2,
  ControllerPublishVolume: 4,
  ControllerUnpublishVolume: 2,
  DeleteVolume: 6,
} as const;

export type BudgetedOp = keyof typeof PROXMOX_CALL_BUDGET;
