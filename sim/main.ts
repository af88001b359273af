// CLI: `npm run sim -- --config <file>`. Prints one JSON line (url, caFile, tokenId, tokenSecret,
// adminUrl, …) once the API answers, then runs until SIGINT/SIGTERM and cleans up.

import { parseArgs } from 'node:util';
import type { BackendKind } from './backend/types.js';
import { startSimulator } from './simulator.js';

const USAGE = `usage: npm run sim -- [options]
  --config FILE          cluster YAML (default sim/default-cluster.yaml)
  --port N               API port on 127.0.0.1 (default: any free port)
  --admin-port N         admin port on 127.0.0.1 (default: any free port)
  --state-dir DIR        certificates and sparse files (default: a temp dir, removed on exit)
  --backend KIND         none | loop | qmp (default none)
  --loop-link-dir DIR    loop backend: links go to DIR/<vm name>/wwn-0x… (default STATE/by-id)
  --qmp VMID=SOCKET      qmp backend: QMP socket of the guest playing VMID (repeatable)
  --faults JSON          fault knobs, e.g. '{"latencyMs":200,"authFailureDelayMs":0}'`;

function fail(msg: string): never {
  process.stderr.write(`pve-sim: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function port(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) fail(`${name}: expected a port number, got '${v}'`);
  return n;
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        config: { type: 'string' },
        port: { type: 'string' },
        'admin-port': { type: 'string' },
        'state-dir': { type: 'string' },
        backend: { type: 'string' },
        'loop-link-dir': { type: 'string' },
        qmp: { type: 'string', multiple: true },
        faults: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (e) {
    fail((e as Error).message);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const qmp: Record<number, string> = {};
  for (const spec of values.qmp ?? []) {
    const [, vmid, socket] = /^(\d+)=(.+)$/.exec(spec) ?? [];
    if (vmid === undefined || socket === undefined) fail(`--qmp: expected VMID=SOCKET, got '${spec}'`);
    qmp[Number(vmid)] = socket;
  }
  let faults: object | undefined;
  if (values.faults) {
    try {
      faults = JSON.parse(values.faults) as object;
    } catch (e) {
      fail(`--faults: ${(e as Error).message}`);
    }
  }
  const backend = (values.backend ?? 'none') as BackendKind;
  if (!['none', 'loop', 'qmp'].includes(backend)) fail(`--backend: none, loop or qmp, got '${backend}'`);

  const sim = await startSimulator({
    ...(values.config ? { config: values.config } : {}),
    ...(values['state-dir'] ? { stateDir: values['state-dir'] } : {}),
    ...(values['loop-link-dir'] ? { loopLinkDir: values['loop-link-dir'] } : {}),
    ...(faults ? { faults } : {}),
    backend,
    qmp,
    port: port(values.port, '--port') ?? 0,
    adminPort: port(values['admin-port'], '--admin-port') ?? 0,
  });
  process.stdout.write(
    `${JSON.stringify({
      url: sim.url,
      caFile: sim.caFile,
      tokenId: sim.tokenId,
      tokenSecret: sim.tokenSecret,
      adminUrl: sim.adminUrl,
      cluster: sim.clusterName,
      nodes: sim.nodes,
      backend: sim.backend,
      stateDir: sim.stateDir,
      loopLinkDir: sim.loopLinkDir,
      pid: process.pid,
    })}\n`,
  );
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    sim.close().then(
      () => process.exit(0),
      (e: unknown) => {
        process.stderr.write(`pve-sim: cleanup after ${signal} failed: ${(e as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((e: unknown) => {
  process.stderr.write(`pve-sim: ${(e as Error).message}\n`);
  process.exit(1);
});
