// What every VM-tier scenario (e2e, luks, move, inline-nfs; run by test/vm/tier.ts inside
// vm.sh) shares: the controller it starts on the host, the guest's coordinates from VM_*
// variables (vm-env.ts), a shell in the guest, and progress lines with checks that end the scenario.
import { guestExec } from './qga.js';
import { vmEnv } from './vm-env.js';
import type { Controller } from './tier.js';

export interface ScenarioDeps {
  freshDir(name: string): string;
  startController(driver: 'proxmox' | 'nfs', runDir: string, o?: { alsoPlays?: number[] }): Promise<Controller>;
}

export interface ScenarioLog {
  /** `[name 12.3s] msg`, seconds since the scenario (re)started. */
  say: (msg: string) => void;
  /** Ends the scenario with `what` unless `cond` holds; says `ok: what` when it does. */
  check: (cond: unknown, what: string) => void;
  /** Starts the clock again (at the start of a run). */
  restart: () => void;
}

export function scenarioLog(name: string): ScenarioLog {
  let t0 = Date.now();
  const say = (msg: string) => {
    console.log(`[${name} ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
  };
  return {
    say,
    check: (cond, what) => {
      if (!cond) throw new Error(`${name} check failed: ${what}`);
      say(`ok: ${what}`);
    },
    restart: () => {
      t0 = Date.now();
    },
  };
}

/** `sh -c script` in the guest (stdin `input`); its trimmed stdout, or an error with its stderr. */
export function guestShell(timeoutMs: number): (script: string, input?: string) => Promise<string> {
  return async (script, input) => {
    const r = await guestExec(vmEnv('VM_QGA_SOCKET'), ['/bin/sh', '-c', script], {
      timeoutMs,
      ...(input !== undefined ? { input } : {}),
    });
    if (r.code !== 0) throw new Error(`guest: ${script}: exit ${r.code}: ${r.stderr.toString().trim()}`);
    return r.stdout.toString().trim();
  };
}
