// Where an operation's time goes, from the simulator's request log: the latency the simulator
// injects, the simulator's own work (a `delay`/`background_delay` waiting for a task, locks), and
// everything outside it (gRPC, the controller's code, HTTPS, timers) before the first call,
// between calls and after the last. The log has millisecond resolution; p50 over many runs.
import type { RequestLogEntry } from '../../sim/requestlog.js';
import type { Row } from './table.js';

export interface Breakdown {
  injected: number;
  simulator: number;
  before: number;
  between: number;
  after: number;
}

/** `start`: Date.now() when the operation was sent; `total`: its measured time (ms). */
export function breakdown(start: number, total: number, entries: RequestLogEntry[], latencyMs: number): Breakdown {
  const calls = entries
    .map((e) => ({ end: Date.parse(e.time), dur: e.durationMs }))
    .map((c) => ({ begin: c.end - c.dur, end: c.end, dur: c.dur }))
    .sort((a, b) => a.begin - b.begin);
  const first = calls[0];
  const last = calls.at(-1);
  if (!first || !last) return { injected: 0, simulator: 0, before: total, between: 0, after: 0 };
  const inSim = calls.reduce((s, c) => s + c.dur, 0);
  const before = Math.max(0, first.begin - start);
  const after = Math.max(0, start + total - last.end);
  return {
    injected: calls.length * latencyMs,
    simulator: Math.max(0, inSim - calls.length * latencyMs),
    before,
    // Calls in flight together overlap: what is not inside any call and not before or after.
    between: Math.max(0, total - before - after - union(calls)),
    after,
  };
}

function union(calls: Array<{ begin: number; end: number }>): number {
  let sum = 0;
  let cur: { begin: number; end: number } | undefined;
  for (const c of calls) {
    if (cur && c.begin <= cur.end) cur.end = Math.max(cur.end, c.end);
    else {
      if (cur) sum += cur.end - cur.begin;
      cur = { ...c };
    }
  }
  return sum + (cur ? cur.end - cur.begin : 0);
}

export function breakdownRows(op: string, xs: readonly Breakdown[]): Row[] {
  const row = (what: string, pick: (b: Breakdown) => number, note: string): Row => ({
    what: `${op}: ${what}`,
    samples: xs.map(pick),
    note,
  });
  return [
    row('injected latency', (b) => b.injected, 'calls × latency (the floor)'),
    row('simulator work', (b) => b.simulator, 'inside the simulator beyond the latency'),
    row('before 1st call', (b) => b.before, 'gRPC in, controller up to its first request'),
    row('between calls', (b) => b.between, 'HTTPS answer → next request'),
    row('after last call', (b) => b.after, 'HTTPS answer → gRPC answer'),
  ];
}
