// How Proxmox's refusals of a changed config are classified: qemu-server's update_vm_api says
// `checksum mismatch (file change by other user?)`, PVE::Tools::assert_if_modified (resize,
// move disk…) `detected modified configuration - file changed by other user? Try again.`. Both
// mean nothing was done and the config must be read again: Busy (ABORTED), and digestRefused.
import t from 'tap';
import { digestRefused, toCsiError } from '../../../../src/proxmox/api/errors.js';

const http = (status: number, reason: string) =>
  Object.assign(new Error(`${status} ${reason}`), { status, statusText: reason, reason });
const ctx = { cluster: 'homelab', what: 'detach scsi1 from VM 111 on hyper1' };

t.test('a stale digest is Busy and recognised as such', async (t) => {
  for (const reason of [
    'checksum mismatch (file change by other user?)',
    'detected modified configuration - file changed by other user? Try again.',
  ]) {
    const e = toCsiError(http(500, reason), ctx);
    t.equal(e.kind, 'Aborted', reason);
    t.ok(digestRefused(e), `digestRefused: ${reason}`);
  }
  const lock = toCsiError(http(500, "can't lock file '/var/lock/qemu-server/lock-111.conf' - got timeout"), ctx);
  t.equal(lock.kind, 'Aborted');
  t.notOk(digestRefused(lock), 'a lock timeout is busy, not a changed config');
});

t.test('403: the missing privilege named, and where the roles are described', async (t) => {
  const who = { ...ctx, what: 'create VM 5400 on hyper1', tokenId: 'kubernetes-csi@pve!csi' };
  // as the proxmox-api package words a refused request
  const denied = (reason: string) => new Error(`POST /api2/json/nodes/hyper1/qemu return Error 403 ${reason}`);
  const options = toCsiError(denied('Permission check failed (/vms/5400, VM.Config.Options)'), who);
  t.equal(options.kind, 'FailedPrecondition');
  t.match(options.message, /lacks VM\.Config\.Options on \/vms\/5400\. Snapshots, restores, clones and move need it/);
  t.match(options.message, /docs\/proxmox-setup\.md/);
  const disk = toCsiError(denied('Permission check failed (/vms/101, VM.Config.Disk)'), who);
  t.match(disk.message, /lacks VM\.Config\.Disk on \/vms\/101\. Grant it a role with VM\.Audit VM\.Config\.Disk/);
});
