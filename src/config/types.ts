// Validated configuration shapes. src/config/load.ts builds them from flags, environment and the
// Proxmox config file (upstream Secret format); nothing else reads flags or env.

export type Mode = 'controller' | 'node' | 'all';

/** One Proxmox VE cluster, as in the upstream proxmox-csi-plugin config.yaml `clusters[]`. */
export interface ProxmoxClusterConfig {
  /** e.g. https://pve.example:8006/api2/json */
  url: string;
  insecure: boolean;
  /** API token (`USER@REALM!TOKENID` + UUID secret), or else username + password below. */
  tokenId?: string;
  tokenSecret?: string;
  /** Ticket login (`POST /access/ticket`), as upstream allows: `root@pam` or any user. */
  username?: string;
  password?: string;
  /** Kubernetes topology region; the Proxmox cluster name. */
  region: string;
  /** PEM CA bundle to verify the API certificate against (our extension: `ca_file`). */
  caFile?: string;
  /**
   * VM names an offline expansion may borrow (our extension: `expansion_helpers`). Unset: the
   * Kubernetes Nodes' names (src/proxmox/controller/safety/expansion-helpers.ts).
   */
  expansionHelpers?: string[];
}

export interface ProxmoxConfig {
  clusters: ProxmoxClusterConfig[];
  /** VMID that owns new disks (`vm-<id>-<pv>`); upstream default 9999. */
  controllerVmId: number;
  /** Upstream's `features.provider`: `capmox` finds VMs by SMBIOS uuid. Our VM lookup accepts every form anyway. */
  provider?: 'default' | 'capmox';
  /** Non-fatal findings (unknown keys, ignored spellings), each naming its key; logged at start. */
  warnings?: string[];
}

export interface NodeIdentity {
  /** Kubernetes node name = Proxmox VM name. */
  nodeId: string;
  /** Topology outside a cluster (flags/env); inside one it comes from the Node's labels. */
  region?: string;
  zone?: string;
  /**
   * Proxmox: the most of this driver's disks kubelet may count on this node (NodeGetInfo's
   * max_volumes_per_node), below what the free SCSI slots allow; undefined = the free slots.
   */
  maxVolumes?: number;
}

export interface AppConfig {
  mode: Mode;
  /** Endpoint per driver; undefined = that driver is not served. `unix:///path` or `tcp://127.0.0.1:PORT`. */
  proxmoxEndpoint?: string;
  nfsEndpoint?: string;
  /** Parsed Proxmox config file; required when the Proxmox driver runs a controller. */
  proxmox?: ProxmoxConfig;
  node: NodeIdentity;
  /** Where the node looks for `wwn-0x…` links when sysfs has no match. */
  deviceDir: string;
  /** Node calls act only on paths strictly inside this directory (kubelet's root). */
  kubeletDir: string;
  /** NFS server ports that skip the portmapper (test servers on non-standard ports). */
  nfsPort?: number;
  nfsMountPort?: number;
  /** NFS: what DeleteVolume does with a handle that records no onDelete (csi-driver-nfs --default-ondelete-policy). */
  nfsDefaultOnDelete: 'delete' | 'retain' | 'archive';
  metricsAddress?: string;
  logLevel: string;
  /** Upper bound for one NFS mount attempt on the node, ms. */
  nfsMountTimeoutMs: number;
  /** Upper bound for one NFS protocol call from the controller, ms. */
  nfsCallTimeoutMs: number;
  /** How long SIGTERM waits for in-flight calls, ms. */
  drainTimeoutMs: number;
  /** The Proxmox thin-pool guard (src/proxmox/controller/safety/pool-guard.ts). */
  poolGuard: { enabled: boolean; maxFill: number; maxOvercommit: number };
  /** Proxmox controller: keep the Nodes' topology labels where their VMs run (proxmox/controller/node-topology.ts). */
  nodeTopologyLabels: boolean;
  /** The day-2 findings metrics: refresh interval (0 = off) and Proxmox call budget. */
  findings: { intervalMs: number; callsPerMinute: number };
}
