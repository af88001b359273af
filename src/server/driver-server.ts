// One gRPC server per driver on its own endpoint, with the services the mode asks for.
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Driver } from '../csi/types.js';
import type { Mode } from '../config/types.js';
import { KeyedLock } from '../locks.js';
import type { Metrics } from './metrics.js';
import { csiGrpc } from './proto.js';
import { controllerService } from '../controller/service.js';
import { nodeService } from '../node/service.js';
import { identityService } from '../csi/identity-service.js';
import type { ControllerHandlers } from '../gen/csi/v1/Controller.js';
import type { IdentityHandlers } from '../gen/csi/v1/Identity.js';
import type { NodeHandlers } from '../gen/csi/v1/Node.js';
import { formatEndpoint, parseEndpoint, type Endpoint } from '../config/endpoint.js';
import { grpcAddress, removeStaleSocket } from './endpoint.js';
import { service, type CallEnv } from './interceptor.js';

export interface DriverServerOptions {
  driver: Driver;
  mode: Mode;
  endpoint: string;
  log: Logger;
  metrics?: Metrics;
  version: string;
  probeTimeoutMs?: number;
}

export interface RunningServer {
  driver: string;
  /** Where it listens, with the real port when 0 was asked for. */
  endpoint: string;
  inflight: () => number;
  /** Stops taking calls, waits up to drainMs for in-flight ones, then closes and removes the socket. */
  stop(drainMs: number): Promise<void>;
}

export async function startDriverServer(o: DriverServerOptions): Promise<RunningServer> {
  const endpoint: Endpoint = parseEndpoint(o.endpoint);
  const log = o.log.child({ driver: o.driver.name });
  const env: CallEnv = {
    driver: o.driver.name,
    log,
    locks: new KeyedLock(),
    inflight: { n: 0 },
    ...(o.metrics && { metrics: o.metrics }),
  };
  const pkg = csiGrpc().csi.v1;
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 });
  server.addService(
    pkg.Identity.service,
    service<IdentityHandlers>(
      env,
      identityService(o.driver, { version: o.version, probeTimeoutMs: o.probeTimeoutMs ?? 5000 }),
    ),
  );
  const services = ['Identity'];
  if (o.mode !== 'node' && o.driver.controller) {
    server.addService(pkg.Controller.service, service<ControllerHandlers>(env, controllerService(o.driver.controller)));
    services.push('Controller');
  }
  if (o.mode !== 'controller' && o.driver.node) {
    server.addService(pkg.Node.service, service<NodeHandlers>(env, nodeService(o.driver.node)));
    services.push('Node');
  }
  if (endpoint.kind === 'unix') await removeStaleSocket(endpoint.path);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(grpcAddress(endpoint), grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  const actual: Endpoint = endpoint.kind === 'tcp' ? { ...endpoint, port } : endpoint;
  log.info({ endpoint: formatEndpoint(actual), services }, 'serving');

  return {
    driver: o.driver.name,
    endpoint: formatEndpoint(actual),
    inflight: () => env.inflight.n,
    async stop(drainMs: number) {
      if (env.inflight.n > 0) log.info({ inflight: env.inflight.n }, 'draining in-flight calls');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn({ inflight: env.inflight.n }, 'drain timeout: closing with calls still in flight');
          server.forceShutdown();
          resolve();
        }, drainMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (endpoint.kind === 'unix') fs.rmSync(endpoint.path, { force: true });
      log.info('stopped');
    },
  };
}
