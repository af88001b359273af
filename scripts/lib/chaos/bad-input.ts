import type { ChaosEnv } from './env.js';
import type { NfsShared } from './nfs.js';
import { Recorder } from './rpc.js';
export async function badInput(_env: ChaosEnv, _s: NfsShared): Promise<Recorder> { return new Recorder('input'); }
