// A small client for the admin endpoint, for tests, the demo and benchmarks.

import type { Faults } from './faults.js';
import type { Counters, RequestLogEntry } from './requestlog.js';

export class SimulatorAdmin {
  constructor(private readonly adminUrl: string) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.adminUrl}${path}`, {
      method,
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const json = (await res.json()) as T & { error?: string };
    if (!res.ok) throw new Error(`simulator admin ${method} ${path}: ${res.status} ${json.error ?? ''}`);
    return json;
  }

  state(): Promise<unknown> {
    return this.call('GET', '/state');
  }
  counters(): Promise<Counters> {
    return this.call('GET', '/counters');
  }
  resetCounters(): Promise<void> {
    return this.call('POST', '/counters/reset');
  }
  requests(since = 0): Promise<{ lastSeq: number; entries: RequestLogEntry[] }> {
    return this.call('GET', `/requests?since=${since}`);
  }
  reset(): Promise<void> {
    return this.call('POST', '/reset');
  }
  faults(): Promise<Faults> {
    return this.call('GET', '/faults');
  }
  /** Merges into the current faults. */
  patchFaults(f: Partial<Faults>): Promise<Faults> {
    return this.call('PATCH', '/faults', f);
  }
  /** Replaces the faults (unset knobs go back to the config file's values). */
  setFaults(f: Partial<Faults>): Promise<Faults> {
    return this.call('PUT', '/faults', f);
  }
  patchVm(
    vmid: number,
    patch: {
      status?: 'running' | 'stopped';
      lock?: string | null;
      hotplug?: string | null;
      /** Edits by hand (no task): key → value, null removes it. */
      config?: Record<string, string | null>;
      pending?: Record<string, string | null>;
      /** Snapshot sections: name → its keys, null removes the section. */
      snapshots?: Record<string, Record<string, string> | null>;
    },
  ): Promise<unknown> {
    return this.call('PATCH', `/vms/${vmid}`, patch);
  }
  /** A guest writes `bytes` into a volume (thin pool usage grows with it). */
  write(w: { node: string; storage: string; volume: string; bytes: number; offset?: number }): Promise<{
    volume: string;
    bytesInPool: number;
  }> {
    return this.call('POST', '/write', w);
  }
  holdLock(lock: { vmid: number } | { node: string; storage: string }, holdMs: number): Promise<unknown> {
    return this.call('POST', '/locks', { ...lock, holdMs });
  }
}
