// The compiled program as a Proxmox controller on a unix socket, configured for a running
// simulator: what bench/proxmox-grpc.ts and bench/proxmox-scale.ts both measure against.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RunningSimulator } from '../../sim/index.js';
import { writeProxmoxConfig } from '../../test/harness/backends.js';
import { type CsiClient, csiClient } from '../../test/helpers/csi-client.js';
import { startProgram } from './program.js';

export interface ProxmoxController {
  c: CsiClient;
  /** Closes the client, stops the program and removes its temp dir (the simulator stays). */
  close(): Promise<void>;
}

export async function startProxmoxController(
  sim: RunningSimulator,
  o: { tmpPrefix: string; callTimeoutMs: number },
): Promise<ProxmoxController> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), o.tmpPrefix));
  const cfg = path.join(dir, 'proxmox.yaml');
  writeProxmoxConfig(cfg, sim, 'homelab');
  const ep = `unix://${path.join(dir, 'csi.sock')}`;
  const prog = await startProgram(
    ['--mode', 'controller', '--proxmox-endpoint', ep, '--proxmox-config', cfg, '--log-level', 'warn'],
    [ep],
  ).catch((e: unknown) => {
    fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const c = csiClient(ep, o.callTimeoutMs);
  return {
    c,
    async close() {
      c.close();
      await prog.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
