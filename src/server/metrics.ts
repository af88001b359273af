// Prometheus metrics: per-method latency and errors, served over plain HTTP on --metrics-address.
import http from 'node:http';
import { splitHostPort } from '../config/endpoint.js';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { HealthCheck } from '../csi/health.js';
import type { GaugeSource } from '../csi/gauges.js';
import { timeoutSignal } from '../timeout-signal.js';

/** Bound for one scrape's backend checks; a backend that does not answer within it is down. */
const HEALTH_TIMEOUT_MS = 5_000;

export class Metrics {
  readonly registry = new Registry();
  readonly latency = new Histogram({
    name: 'csi_operation_duration_seconds',
    help: 'Duration of CSI calls by driver, method and gRPC code',
    labelNames: ['driver', 'method', 'code'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly errors = new Counter({
    name: 'csi_operation_errors_total',
    help: 'CSI calls that ended with a non-OK gRPC code',
    labelNames: ['driver', 'method', 'code'] as const,
    registers: [this.registry],
  });

  private readonly healthChecks: Array<{ driver: string; check: HealthCheck }> = [];
  /** 1 when the backend answered its last check, 0 when not; checked at each scrape. */
  readonly backendUp = new Gauge({
    name: 'csi_backend_up',
    help: 'Whether a backend (Proxmox cluster, NFS server in use) answers: 1 up, 0 down; checked at each scrape',
    labelNames: ['driver', 'kind', 'backend'] as const,
    registers: [this.registry],
    collect: async () => {
      this.backendUp.reset();
      await Promise.all(
        this.healthChecks.map(async ({ driver, check }) => {
          const deadline = timeoutSignal(HEALTH_TIMEOUT_MS);
          const results = await check(deadline.signal)
            .catch(() => [])
            .finally(deadline.clear);
          for (const r of results) this.backendUp.set({ driver, kind: r.kind, backend: r.backend }, r.up ? 1 : 0);
        }),
      );
    },
  });

  constructor(defaults = true) {
    if (defaults) collectDefaultMetrics({ register: this.registry });
  }

  observe(driver: string, method: string, code: string, seconds: number): void {
    this.latency.observe({ driver, method, code }, seconds);
    if (code !== 'OK') this.errors.inc({ driver, method, code });
  }

  /**
   * Adds a source's gauges (src/csi/gauges.ts) to the registry: each scrape sets them from
   * the source's snapshot. A name registered twice is refused by the registry (a programming error).
   */
  addGauges(source: GaugeSource): void {
    for (const def of source.defs) {
      const gauge: Gauge = new Gauge({
        name: def.name,
        help: def.help,
        labelNames: def.labelNames,
        registers: [this.registry],
        collect: () => {
          gauge.reset();
          for (const s of source.snapshot()) if (s.name === def.name) gauge.set(s.labels, s.value);
        },
      });
    }
  }

  /** Adds a driver's backend health check to csi_backend_up. */
  watchBackends(driver: string, check: HealthCheck): void {
    this.healthChecks.push({ driver, check });
  }
  /**
   * What /healthz answers: 200 when `check` says ok, else 503 with its detail. Without one
   * (before the sockets are up) /healthz says ok: the listener itself is alive.
   */
  health: (() => Promise<{ ok: boolean; detail: string }>) | undefined;

  /** Starts the HTTP endpoint; resolves once listening. */
  async serve(address: string): Promise<http.Server> {
    const { host, port } = splitHostPort(address);
    const server = http.createServer((req, res) => {
      if (req.url === '/metrics') {
        this.registry.metrics().then(
          (body) => {
            res.writeHead(200, { 'Content-Type': this.registry.contentType });
            res.end(body);
          },
          (err: unknown) => {
            res.writeHead(500);
            res.end(String(err));
          },
        );
        return;
      }
      if (req.url === '/healthz') {
        const check = this.health ?? (async () => ({ ok: true, detail: 'ok' }));
        check().then(
          (r) => {
            res.writeHead(r.ok ? 200 : 503, { 'Content-Type': 'text/plain' });
            res.end(`${r.detail}\n`);
          },
          (err: unknown) => {
            res.writeHead(503);
            res.end(`${String(err)}\n`);
          },
        );
        return;
      }
      res.writeHead(404);
      res.end('not found');
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    return server;
  }
}
