// The program in this process as main.ts composes it from a command line (loadConfig →
// buildDrivers → one gRPC server per driver), env left empty; servers and backends are closed on
// the test's teardown. For drop-in tests that need the composition but also the process's state.
import { pino } from 'pino';
import { loadConfig } from '../../src/config/load.js';
import { buildDrivers } from '../../src/drivers.js';
import { startDriverServer, type RunningServer } from '../../src/server/driver-server.js';
import { csiClient, type CsiClient } from './csi-client.js';
import type { Teardown } from './teardown.js';

/** A client of the first driver's endpoint (the program serves one driver per endpoint flag). */
export async function composeProgram(t: Teardown, flags: string[]): Promise<CsiClient> {
  const log = pino({ level: 'silent' });
  const loaded = loadConfig([...flags, '--log-level', 'silent'], {});
  if (loaded.kind !== 'run') throw new Error(`loadConfig answered ${loaded.kind}`);
  const composed = await buildDrivers(loaded.config, log);
  const servers: RunningServer[] = [];
  t.teardown(async () => {
    await Promise.all(servers.map((s) => s.stop(1000)));
    await composed.close();
  });
  for (const { driver, endpoint } of composed.drivers)
    servers.push(await startDriverServer({ driver, endpoint, mode: loaded.config.mode, log, version: 'dropin' }));
  const first = servers[0];
  if (!first) throw new Error('the command line names no driver endpoint');
  const c = csiClient(first.endpoint);
  t.teardown(() => {
    c.close();
  });
  return c;
}
