// The fewest Proxmox API calls each CSI operation can make on its happy path (steady state,
// caches warm), shared by the unit test that fails on a regression (test/unit/proxmox/
// calls-per-op.test.ts) and the bench that prints calls next to them (bench/proxmox-grpc.ts).
//
// - CreateVolume 1: POST …/storage/{storage}/content (allocate). The storage content is read
//   only when the allocation says the name exists (or its answer was lost).
// - ControllerPublishVolume 3: GET …/pending (config, pending changes and digest: slot plan,
//   the VM's own disks, hotplug), POST …/config with that digest, GET /nodes/{node}/tasks: this
//   change's task status (done, most of the time) and, in the same answer, every config change
//   another instance of the driver (same token) made on the host since the disk index was read
//   — exclusivity re-checked after landing without reading every VM.
// - ControllerUnpublishVolume 3: GET …/pending (which scsiN holds the disk now: PUT …/unlink
//   carries no digest, so a key is never unlinked from a stale view), PUT …/unlink, GET …/pending
//   to confirm no pending delete is left. The estimate was 2 (unlink + confirm); the read
//   before is the guarantee that a VM's own disk or another volume is never unlinked.
// - DeleteVolume 2: GET /nodes/{node}/tasks (no other instance attached it since the disk index
//   was read), DELETE …/content/{volume} with `delay` (answers when the free task ended).
export const PROXMOX_CALL_BUDGET = {
  CreateVolume: 1,
  ControllerPublishVolume: 3,
  ControllerUnpublishVolume: 3,
  DeleteVolume: 2,
} as const;

export type BudgetedOp = keyof typeof PROXMOX_CALL_BUDGET;
