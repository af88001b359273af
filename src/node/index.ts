// Entry points for main.ts: one NodeBackend per driver.
export { createProxmoxNode, PROXMOX_NODE_CAPABILITIES, SCSI_SLOTS, type ProxmoxNodeOptions } from './proxmox-node.js';
export { createNfsNode, NFS_NODE_CAPABILITIES, type NfsNodeOptions } from './nfs-node.js';
export { inClusterNodeLabels, type NodeLabelSource } from './topology.js';
export { NFS_CONTEXT } from './nfs-context.js';
export { PUBLISH_CONTEXT_DEVICE_PATH, PUBLISH_CONTEXT_LUN } from './wwn.js';
export { VOLUME_CONTEXT_BLOCK_SIZE, VOLUME_CONTEXT_INODE_SIZE, VOLUME_CONTEXT_FSTYPE } from './proxmox-stage.js';
