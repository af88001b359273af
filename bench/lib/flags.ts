// The benches' command lines: numeric flags with their defaults (`--runs 20`) and --md (the table
// as Markdown, for docs/performance.md).
import { parseArgs } from 'node:util';

/** `--<name> N` for each entry of `defaults` (a value that is not a number is refused), and --md. */
export function benchFlags<K extends string>(defaults: Record<K, number>): Record<K, number> & { md: boolean } {
  const names = Object.keys(defaults) as K[];
  const { values } = parseArgs({
    options: {
      ...Object.fromEntries(names.map((k) => [k, { type: 'string' as const }])),
      md: { type: 'boolean', default: false },
    },
  });
  const parsed: Record<string, unknown> = values;
  const numbers = Object.fromEntries(
    names.map((k) => {
      const raw = parsed[k];
      const n = typeof raw === 'string' ? Number(raw) : defaults[k];
      if (!Number.isFinite(n)) throw new Error(`--${k}: expected a number, got ${String(raw)}`);
      return [k, n];
    }),
  ) as Record<K, number>;
  return { ...numbers, md: values.md };
}
