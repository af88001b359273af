// Backend health, kept apart from Probe. Probe answers whether this process can serve (it is
// up and configured); a NAS or Proxmox outage, or one volume handle naming a server that is
// gone, must not make the kubelet's livenessprobe restart the plugin in a loop. Each backend
// (a Proxmox cluster, an NFS server in use) reports up or down here; the gauge
// csi_backend_up shows it and a change is logged once.
import type { Logger } from 'pino';

export interface BackendHealth {
  /** e.g. "proxmox" or "nfs". */
  kind: string;
  /** The cluster's region or the NFS server's name. */
  backend: string;
  up: boolean;
  error?: string;
}

export type HealthCheck = (signal: AbortSignal) => Promise<BackendHealth[]>;

/** Logs each backend's transitions (down once, recovered once), not every check. */
export class HealthLog {
  private readonly last = new Map<string, boolean>();
  constructor(private readonly log: Logger) {}

  note(results: BackendHealth[]): BackendHealth[] {
    for (const r of results) {
      const key = `${r.kind}/${r.backend}`;
      const was = this.last.get(key);
      this.last.set(key, r.up);
      if (was === r.up) continue;
      if (!r.up) this.log.warn({ kind: r.kind, backend: r.backend, err: r.error }, 'backend is not answering');
      else if (was === false) this.log.info({ kind: r.kind, backend: r.backend }, 'backend answers again');
    }
    return results;
  }
}
