// The upstream driver's WWN scheme, shared by the controller (which sets it on the drive) and
// the node (which looks the disk up by it): the hex of the ASCII text `PVC-ID%02d` of the SCSI
// slot, e.g. slot 1 → 5056432d49443031. Without the `0x` prefix.
export function pvcIdWwnHex(slot: number): string {
  return Buffer.from(`PVC-ID${String(slot).padStart(2, '0')}`, 'ascii').toString('hex');
}
