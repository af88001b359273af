// One table per bench area, the same columns everywhere: p50 and p95 of what was measured, the
// physical minimum where one exists (what the same work costs without our program in the way),
// and the ratio p50 / minimum.
import os from 'node:os';

export interface Row {
  what: string;
  /** Samples (ms, MiB, calls…); p50/p95 are taken from them. A single value is both. */
  samples: readonly number[];
  /** The physical minimum in the same unit, when one exists. */
  min?: number | undefined;
  /** Where the minimum comes from, or any other short remark. */
  note?: string | undefined;
}

export function pct(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? Number.NaN;
}

function fmt(x: number | undefined): string {
  if (x === undefined || Number.isNaN(x)) return '–';
  if (Math.abs(x) >= 100) return x.toFixed(0);
  if (Math.abs(x) >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

export interface Table {
  title: string;
  unit: string;
  rows: Row[];
  /** Also p99 and the tail ratio p95 / p50 (latency tables whose spread is a goal). */
  tail?: boolean;
}

/** Plain text, aligned; also the Markdown docs/performance.md is pasted from (--md). */
export function renderTable(t: Table, markdown = process.argv.includes('--md')): string {
  const tail = t.tail ? [`p99 (${t.unit})`, 'p95 / p50'] : [];
  const head = ['what', `p50 (${t.unit})`, `p95 (${t.unit})`, ...tail, 'minimum', 'ratio', 'note'];
  const body = t.rows.map((r) => {
    const p50 = pct(r.samples, 50);
    const p95 = pct(r.samples, 95);
    const ratio = r.min !== undefined && r.min > 0 ? `${(p50 / r.min).toFixed(2)}×` : '–';
    const tails = t.tail ? [fmt(pct(r.samples, 99)), p50 > 0 ? `${(p95 / p50).toFixed(2)}×` : '–'] : [];
    return [r.what, fmt(p50), fmt(p95), ...tails, fmt(r.min), ratio, r.note ?? ''];
  });
  if (markdown) {
    const line = (c: string[]) => `| ${c.join(' | ')} |`;
    return [`**${t.title}**`, '', line(head), line(head.map(() => '---')), ...body.map(line)].join('\n');
  }
  const w = head.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? '').length)));
  const line = (c: string[]) =>
    c
      .map((x, i) => (i === 0 || i === c.length - 1 ? x.padEnd(w[i] ?? 0) : x.padStart(w[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [t.title, line(head), w.map((n) => '-'.repeat(n)).join('  '), ...body.map(line)].join('\n');
}

/** Every table says how busy the machine was when it was printed (1, 5 and 15 min load average). */
export function printTable(t: Table): void {
  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');
  process.stdout.write(renderTable({ ...t, title: `${t.title} [load average ${load}]` }) + '\n\n');
}

/** Milliseconds since `start` (process.hrtime.bigint()). */
export const since = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await fn();
  return since(t0);
}

/** Runs fn over items with at most `limit` in flight. */
export async function pool<T>(items: readonly T[], limit: number, fn: (x: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const item = items[next++] as T;
        await fn(item);
      }
    }),
  );
}
