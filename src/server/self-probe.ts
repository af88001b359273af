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

/** A CSI Identity client of an endpoint as served (`unix:///path` or `tcp://127.0.0.1:PORT`). */
export function identityClient(endpoint: string): grpc.Client {
  const target = endpoint.startsWith('tcp://') ? endpoint.slice('tcp://'.length) : endpoint;
  return new (csiGrpc().csi.v1.Identity)(target, grpc.credentials.createInsecure());
}

/** One CSI Probe: undefined when ready, else why not (the call's error, or "not ready"). */
export function probeReady(c: grpc.Client, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = (c as unknown as { Probe: ProbeFn }).Probe;
    probe.call(c, {}, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err) resolve(err.message);
      // An unset `ready` means ready (CSI spec); false means the backend is not.
      else if (res?.ready?.value === false) resolve('not ready');
      else resolve(undefined);
    });
  });
}

/** endpoints: driver name → `unix:///path` or `tcp://127.0.0.1:PORT` as served. */
export function selfProbe(
  endpoints: ReadonlyMap<string, string>,
  timeoutMs: number,
): { check(): Promise<SelfProbeResult>; close(): void } {
  const clients = new Map<string, grpc.Client>();
  for (const [driver, endpoint] of endpoints) clients.set(driver, identityClient(endpoint));
  const one = async (driver: string, c: grpc.Client) => {
    const why = await probeReady(c, timeoutMs);
    return why === undefined ? undefined : `${driver}: ${why}`;
  };
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
