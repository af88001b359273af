// Long synchronous loops of background work (the findings' judgement) in slices: the event loop
// gets a turn every `sliceMs` and at least every `every` items, so a CSI call that arrives during
// a refresh of 10,000 claims waits a few milliseconds, not the whole refresh.
import { setImmediate as turn } from 'node:timers/promises';

export interface SliceOptions {
  sliceMs?: number;
  every?: number;
}

/** fn over every item, yielding to the event loop between slices. */
export async function inSlices<T>(items: Iterable<T>, fn: (t: T) => void, o: SliceOptions = {}): Promise<void> {
  const sliceMs = o.sliceMs ?? 5;
  const every = o.every ?? 256;
  let since = performance.now();
  let n = 0;
  for (const item of items) {
    fn(item);
    if (++n % every === 0 || performance.now() - since >= sliceMs) {
      await turn();
      since = performance.now();
    }
  }
}
