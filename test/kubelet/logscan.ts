// What the kubelet tier looks for in every component's log, as pure functions of the lines: the
// word "forbidden" (an RBAC or admission refusal somebody's retry hides) and error lines that
// repeat (a loop that a passing scenario outlives), each error line reduced to its shape first.

/** The klog header (`E1202 06:01:02.345678   123 file.go:45] `), timestamps, numbers and ids go. */
export function errorShape(line: string): string {
  return line
    .replace(/^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\S+\]\s*/, '')
    .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?/g, 'T')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, 'U')
    .replace(/\b[0-9a-f]{12,}\b/gi, 'H')
    .replace(/\d+(\.\d+)?/g, 'N')
    .slice(0, 300);
}

/** An error line: klog's E/F severity, or a JSON/logfmt/plain line whose level or text says error. */
export function isErrorLine(line: string): boolean {
  return (
    /^[EF]\d{4} /.test(line) ||
    /"level":\s*"?(error|fatal|50|60)"?/i.test(line) ||
    /\blevel=(error|fatal)\b/i.test(line) ||
    /\bERROR\b/.test(line)
  );
}

/** Error shapes seen at least `threshold` times, most frequent first, with their counts and one example. */
export function repeatedErrors(
  lines: Iterable<string>,
  threshold: number,
): { shape: string; count: number; example: string }[] {
  const seen = new Map<string, { count: number; example: string }>();
  for (const line of lines) {
    if (!isErrorLine(line)) continue;
    const shape = errorShape(line);
    const s = seen.get(shape);
    if (s) s.count++;
    else seen.set(shape, { count: 1, example: line.slice(0, 400) });
  }
  return [...seen]
    .filter(([, v]) => v.count >= threshold)
    .map(([shape, v]) => ({ shape, ...v }))
    .sort((a, b) => b.count - a.count);
}

/** The lines that say "forbidden", whatever the case. */
export const forbiddenLines = (lines: Iterable<string>): string[] => [...lines].filter((l) => /forbidden/i.test(l));

/** The median (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new Error('median of nothing');
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}
