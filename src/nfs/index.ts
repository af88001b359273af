// Public surface of the NFS backend for the subcommands (src/cli): what they use of the driver,
// so they depend on this list and not on its internals.
export { NFS_DRIVER_NAME, NFS_CONTEXT } from './contract.js';
export { parseVolumeId } from './volume-id.js';
export { lookupPort, MOUNT_PROGRAM, MOUNT_V3 } from './client/mount.js';
export { NFS_PROGRAM, NFS_V3 } from './client/nfs3.js';
export { createNfs3Stores } from './controller/store/nfs3-store.js';
export { parseCreateParams } from './controller/params.js';
