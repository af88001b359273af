// src/late-v8-flags.ts: the flags the entrypoint defers (--no-opt --no-maglev) take effect when
// set at run time: a function made hot afterwards stays unoptimised, as it would with the flags on
// the command line, and without them the same function is optimised (so the check can fail).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { applyLateV8Flags } from '../../src/late-v8-flags.js';

const MODULE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/late-v8-flags.ts');

/** In a fresh node: apply `late`, make a function hot, report whether TurboFan optimised it. */
function optimisedAfter(late: string | undefined): boolean {
  const script = `
    const { applyLateV8Flags } = await import(${JSON.stringify(MODULE)});
    applyLateV8Flags(${JSON.stringify(late === undefined ? {} : { PVE_NFS_CSI_V8_FLAGS_AFTER_START: late })});
    function f(x) { return x * 2 + 1; }
    let s = 0;
    for (let i = 0; i < 3e6; i++) s += f(i);
    // %GetOptimizationStatus bit 4 (16): optimised by TurboFan.
    process.stdout.write(String((%GetOptimizationStatus(f) & 16) !== 0));`;
  const out = execFileSync(
    process.execPath,
    ['--allow-natives-syntax', '--import=tsx', '--input-type=module', '-e', script],
    { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } },
  );
  return out.trim() === 'true';
}

t.test('--no-opt set after start keeps a hot function unoptimised; without it, it is optimised', async (t) => {
  t.equal(optimisedAfter(undefined), true, 'no late flags: TurboFan optimises the hot function');
  t.equal(optimisedAfter('--no-opt --no-maglev'), false, 'late --no-opt --no-maglev: it is not');
});

t.test('the flags are split on whitespace; empty or unset is none', async (t) => {
  t.same(applyLateV8Flags({}), []);
  t.same(applyLateV8Flags({ PVE_NFS_CSI_V8_FLAGS_AFTER_START: '  ' }), []);
  // A harmless flag for this test process (it only affects stack trace formatting).
  t.same(applyLateV8Flags({ PVE_NFS_CSI_V8_FLAGS_AFTER_START: ' --stack-trace-limit=20  ' }), [
    '--stack-trace-limit=20',
  ]);
});
