// The error a call is expected to fail with: `const err = await rejection(call())`. A call that
// succeeds, or rejects with something that is not an Error, fails the test here with a message
// saying so, instead of handing an untyped value to the assertions that follow.

/** What the project's calls reject with: an Error, a CsiError (kind), a CommandError (stderr) or a gRPC ServiceError (code, details). */
export type Rejection = Error & { code?: unknown; details?: string; kind?: string; stderr?: string };

export async function rejection(p: Promise<unknown>): Promise<Rejection> {
  try {
    await p;
  } catch (e) {
    if (e instanceof Error) return e;
    throw new Error(`rejected with something that is not an Error: ${String(e)}`, { cause: e });
  }
  throw new Error('expected the call to fail, but it succeeded');
}
