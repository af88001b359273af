// Keyed in-flight locks: a second call for a key that is already being worked on is refused with
// ABORTED at once (the CSI spec's answer for "operation pending for volume"); the sidecars retry.
import { Busy } from '../errors.js';

export class KeyedLocks {
  private readonly held = new Set<string>();

  async run<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    const unique = [...new Set(keys.filter((k) => k !== ''))];
    const busy = unique.find((k) => this.held.has(k));
    if (busy !== undefined) throw new Busy(`an operation on ${busy} is already in progress; retry later`);
    for (const k of unique) this.held.add(k);
    try {
      return await fn();
    } finally {
      for (const k of unique) this.held.delete(k);
    }
  }

  get size(): number {
    return this.held.size;
  }
}
