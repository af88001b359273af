#!/usr/bin/env node
// flags/config → adapters → services → servers; then wait for SIGTERM/SIGINT and drain.
import { pino } from 'pino';
import { loadConfig, SERVE_FLAGS } from './config/load.js';
import { ConfigError } from './config/errors.js';
import { selfProbe } from './server/self-probe.js';
import { startDriverServer, type RunningServer } from './server/driver-server.js';
import { buildDrivers } from './drivers.js';
import { packageVersion } from './version.js';
import { timeoutSignal } from './timeout-signal.js';
import { programUsage, runSubcommand } from './cli/index.js';
import { applyLateV8Flags } from './late-v8-flags.js';

/** Time allowed after the drain for closing connections before the process exits anyway. */
const CLOSE_GRACE_MS = 1500;
/** How often backend health is checked for the log when nothing scrapes the metrics. */
const HEALTH_LOG_INTERVAL_MS = 60_000;
/** Above the server's own Probe bound (5 s, then "not ready"), below the chart's probe timeout (10 s). */
const HEALTH_PROBE_TIMEOUT_MS = 8000;

async function main(): Promise<void> {
  const sub = await runSubcommand(process.argv.slice(2), {
    out: process.stdout,
    err: process.stderr,
    env: process.env,
  });
  if (sub !== undefined) {
    process.exitCode = sub;
    return;
  }
  let loaded;
  try {
    loaded = loadConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`pve-nfs-csi: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  if (loaded.kind === 'help') {
    process.stdout.write((await programUsage(SERVE_FLAGS)) + '\n');
    return;
  }
  const version = packageVersion();
  if (loaded.kind === 'version') {
    process.stdout.write(version + '\n');
    return;
  }
  const config = loaded.config;
  const log = pino({
    level: config.logLevel,
    base: { app: 'pve-nfs-csi', mode: config.mode },
    // Belt and braces: the interceptor already redacts requests; these catch stray objects.
    redact: {
      paths: ['*.tokenSecret', '*.token_secret', '*.password', '*.secrets', 'config.proxmox'],
      censor: '[REDACTED]',
    },
  });
  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  for (const w of config.proxmox?.warnings ?? []) log.warn(w);

  // prom-client (and its OpenTelemetry shim) only when metrics are asked for: ~20 ms of start.
  const metrics = config.metricsAddress ? new (await import('./server/metrics.js')).Metrics() : undefined;
  const metricsServer = metrics && config.metricsAddress ? await metrics.serve(config.metricsAddress) : undefined;
  if (metricsServer) log.info({ address: config.metricsAddress }, 'metrics served at /metrics');

  const servers: RunningServer[] = [];
  const composed = await buildDrivers(config, log);
  try {
    for (const { driver, endpoint } of composed.drivers) {
      servers.push(
        await startDriverServer({ driver, endpoint, mode: config.mode, log, version, ...(metrics && { metrics }) }),
      );
    }
  } catch (e) {
    log.error({ err: e }, 'cannot start');
    await Promise.all(servers.map((s) => s.stop(0)));
    process.exit(1);
  }
  for (const g of composed.gauges) metrics?.addGauges(g);
  for (const { driver } of composed.drivers) {
    const health = driver.health?.bind(driver);
    if (!health) continue;
    metrics?.watchBackends(driver.name, health);
    // Also without a scraper: an outage and its end are logged (once each) within a minute.
    setInterval(() => {
      const deadline = timeoutSignal(5_000);
      void health(deadline.signal)
        .catch(() => undefined)
        .finally(deadline.clear);
    }, HEALTH_LOG_INTERVAL_MS).unref();
  }
  // /healthz probes every socket served (the chart's liveness probe of the driver container).
  const self = metrics
    ? selfProbe(new Map(servers.map((s) => [s.driver, s.endpoint])), HEALTH_PROBE_TIMEOUT_MS)
    : undefined;
  if (metrics && self) metrics.health = () => self.check();
  // One machine-readable line so scripts can find the endpoints (ports chosen by the OS included).
  process.stdout.write(
    JSON.stringify({ ready: true, endpoints: Object.fromEntries(servers.map((s) => [s.driver, s.endpoint])) }) + '\n',
  );
  applyLateV8Flags(process.env);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    // Exit is bounded by the drain timeout plus a little, whatever a backend does: calls still
    // running after the drain are abandoned (their HTTP requests aborted), and the next start
    // reconciles from Proxmox's and the NFS server's state, as it does after kill -9.
    setTimeout(() => {
      log.warn('backends did not close in time; exiting anyway');
      log.flush();
      process.exit(0);
    }, config.drainTimeoutMs + CLOSE_GRACE_MS).unref();
    await Promise.all(servers.map((s) => s.stop(config.drainTimeoutMs)));
    await composed.close().catch((err: unknown) => log.warn({ err }, 'closing backends'));
    self?.close();
    metricsServer?.close();
    log.flush();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((err: unknown) => {
  process.stderr.write(`pve-nfs-csi: fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
