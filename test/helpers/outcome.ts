// How a CSI backend call ended, for tests that assert on refusals and successes alike: `ok`, the
// CsiError's kind (src/errors.ts), or `untyped` for anything else (a bug: every refusal is typed).
import { isCsiError } from '../../src/errors.js';

export interface Outcome {
  /** `ok`, a CsiError kind (`Aborted`, `FailedPrecondition`…), or `untyped`. */
  kind: string;
  /** The error's message; empty when the call succeeded. */
  message: string;
}

export async function outcome(p: Promise<unknown>): Promise<Outcome> {
  try {
    await p;
    return { kind: 'ok', message: '' };
  } catch (e) {
    return { kind: isCsiError(e) ? e.kind : 'untyped', message: e instanceof Error ? e.message : String(e) };
  }
}

/** The outcome as one string: `ok`, the kind, or `untyped: <message>` so an untyped failure shows its cause. */
export async function kindOf(p: Promise<unknown>): Promise<string> {
  const o = await outcome(p);
  return o.kind === 'untyped' ? `untyped: ${o.message}` : o.kind;
}

/** `no error`, `<Kind>: <message>`, or `not a CsiError: <error>`: one string for a regex to match. */
export async function outcomeText(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (e) {
    return describe(e);
  }
}

/** outcomeText of a synchronous call. */
export function outcomeTextSync(fn: () => unknown): string {
  try {
    fn();
    return 'no error';
  } catch (e) {
    return describe(e);
  }
}

function describe(e: unknown): string {
  return isCsiError(e) ? `${e.kind}: ${e.message}` : `not a CsiError: ${String(e)}`;
}
