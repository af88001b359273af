import type { Ganesha } from '../../../test/unit/nfs/ganesha.js';
import type { ChaosEnv } from './env.js';
import { Recorder } from './rpc.js';
export interface NfsShared { runDir: string; ganesha?: Ganesha }
export async function nfsScenario(_env: ChaosEnv, _s: NfsShared): Promise<Recorder> { return new Recorder('nfs'); }
