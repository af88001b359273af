// What the kubelet tier looks for in every component's log, as pure functions of the lines: the
// word "forbidden" (an RBAC or admission refusal somebody's retry hides) and error lines that
// repeat (a loop that a passing scenario outlives), each error line reduced to its shape first.

/** A UUID (a PV's, a pod's): a shape hides it; a loop is told by it. */
const UUID_RE = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;

/** The klog header (`E1202 06:01:02.345678   123 file.go:45] `), timestamps, numbers and ids go. */
export function errorShape(line: string): string {
  return line
    .replace(/^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\S+\]\s*/, '')
    .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?/g, 'T')
    .replace(new RegExp(UUID_RE.source, 'gi'), 'U')
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

/**
 * Error shapes seen at least `threshold` times about one object, most frequent first, with their
 * counts and one example. The object is the first UUID in the line (a PV, a pod), or none: the
 * same failure repeating for the same thing (or for nothing in particular) is a loop; one failure
 * each for many volumes (an optimistic-concurrency conflict per PV as two controllers remove their
 * finalizers) is not, and each volume's outcome is asserted by its scenario.
 */
export function repeatedErrors(
  lines: Iterable<string>,
  threshold: number,
): { shape: string; count: number; example: string }[] {
  const seen = new Map<string, { shape: string; count: number; example: string }>();
  for (const line of lines) {
    if (!isErrorLine(line)) continue;
    const shape = errorShape(line);
    const key = `${shape}\u0000${UUID_RE.exec(line)?.[0].toLowerCase() ?? ''}`;
    const s = seen.get(key);
    if (s) s.count++;
    else seen.set(key, { shape, count: 1, example: line.slice(0, 400) });
  }
  return [...seen.values()].filter((v) => v.count >= threshold).sort((a, b) => b.count - a.count);
}

/**
 * kubelet's image-filesystem stats on the test node, whose /var/lib/containerd is a tmpfs
 * (test/kubelet/guest-node.sh: the guest's overlay root cannot hold overlayfs snapshots):
 * cadvisor keys a tmpfs by its mount point and then finds no device for it, so the eviction
 * manager's every sync (10 s) logs these. Allowed by the tier only after it has read that the
 * guest's /var/lib/containerd is a tmpfs; a Talos node keeps it on its EPHEMERAL partition.
 */
export function imageFsOnTmpfs(line: string): boolean {
  return (
    /cannot find filesystem info for device \\?"\/var\/lib\/containerd\\?"/.test(line) &&
    /cri_stats_provider\.go|eviction_manager\.go/.test(line)
  );
}

/**
 * The pod ("namespace/name") of a kubelet status-manager line that is forbidden only because the
 * pod is already deleted, else undefined. kubelet's status manager GETs a pod before patching its
 * status (pkg/kubelet/status/status_manager.go, syncPod) and treats NotFound as "gone"; but the
 * Node authorizer answers for objects in its graph only, and a deleted pod has left it, so the GET
 * is refused ("no relationship found between node ... and this object") instead of NotFound.
 * kubelet logs it once and drops the status with the pod. The tier still checks that each pod so
 * named is gone from the API: a refusal for a pod that exists is a real RBAC defect.
 */
export function deletedPodStatusGet(line: string): string | undefined {
  if (!line.includes('"Failed to get status for pod"')) return undefined;
  if (!/is forbidden: User \\?"system:node:[^"\\]+\\?" cannot get resource \\?"pods\\?"/.test(line)) return undefined;
  if (!line.includes('no relationship found between node')) return undefined;
  return / pod="([^"\\]+)"/.exec(line)?.[1];
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
