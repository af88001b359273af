// /healthz of the metrics listener: calls CSI Probe on every socket this process serves, over
// the socket itself, the way the livenessprobe sidecar does. One sidecar can watch only one
// socket and the kubelet restarts only the container whose probe fails, so the driver
// container's own liveness probe asks this instead: a hung NFS side fails it as well as a hung
// Proxmox side.
import * as grpc from '@grpc/grpc-js';
import { csiGrpc } from './proto.js';

export interface SelfProbeResult {
  ok: boolean;
  /** One line per driver: "<driver>: ready" or what went wrong. */
  detail: string;
}

type ProbeFn = (
  req: object,
  md: grpc.Metadata,
  o: grpc.CallOptions,
  cb: (e: grpc.ServiceError | null, r?: { ready?: { value?: boolean } | null }) => void,
) => void;

/** endpoints: driver name → `unix:///path` or `tcp://127.0.0.1:PORT` as served. */
export function selfProbe(
  endpoints: ReadonlyMap<string, string>,
  timeoutMs: number,
): { check(): Promise<SelfProbeResult>; close(): void } {
  const Identity = csiGrpc().csi.v1.Identity;
  const clients = new Map<string, grpc.Client>();
  for (const [driver, endpoint] of endpoints) {
    const target = endpoint.startsWith('tcp://') ? endpoint.slice('tcp://'.length) : endpoint;
    clients.set(driver, new Identity(target, grpc.credentials.createInsecure()));
  }
  const one = (driver: string, c: grpc.Client) =>
    new Promise<string | undefined>((resolve) => {
      const probe = (c as unknown as { Probe: ProbeFn }).Probe;
      probe.call(c, {}, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
        if (err) resolve(`${driver}: ${err.message}`);
        // An unset `ready` means ready (CSI spec); false means the backend is not.
        else if (res?.ready?.value === false) resolve(`${driver}: not ready`);
        else resolve(undefined);
      });
    });
  return {
    async check() {
      const results = await Promise.all([...clients].map(async ([d, c]) => [d, await one(d, c)] as const));
      const failed = results.filter(([, e]) => e !== undefined);
      return {
        ok: failed.length === 0,
        detail: results.map(([d, e]) => e ?? `${d}: ready`).join('\n'),
      };
    },
    close: () => clients.forEach((c) => c.close()),
  };
}
