// The shared in-flight request (src/single-flight.ts): callers share one request per key, a
// failure is not kept, and one caller's cancellation ends only its own wait.
import t from 'tap';
import { SingleFlight } from '../../src/single-flight.js';
import { isCsiError } from '../../src/errors.js';

/** A request the test settles by hand, recording the signal it was started with. */
function manual<T>() {
  const started: Array<{ signal: AbortSignal; resolve: (v: T) => void; reject: (e: Error) => void }> = [];
  const start = (signal: AbortSignal) =>
    new Promise<T>((resolve, reject) => {
      started.push({ signal, resolve, reject });
    });
  return { started, start };
}
const tick = () => new Promise((r) => setImmediate(r));

t.test('callers of one key share one request; other keys get their own', async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const a = sf.run('x', m.start);
  const b = sf.run('x', m.start);
  const c = sf.run('y', m.start);
  await tick();
  t.equal(m.started.length, 2, 'one request for x, one for y');
  m.started[0]?.resolve(1);
  m.started[1]?.resolve(2);
  t.same(await Promise.all([a, b, c]), [1, 1, 2]);
  t.equal(sf.size, 0, 'nothing kept after settling');
  const d = sf.run('x', m.start);
  await tick();
  t.equal(m.started.length, 3, 'a caller after the answer starts a new request');
  m.started[2]?.resolve(3);
  t.equal(await d, 3);
});

t.test('a failure is shared by the callers waiting, and not kept for the next one', async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const a = sf.run('x', m.start);
  const b = sf.run('x', m.start);
  await tick();
  m.started[0]?.reject(new Error('boom'));
  await t.rejects(a, /boom/);
  await t.rejects(b, /boom/);
  t.equal(sf.size, 0);
  const c = sf.run('x', m.start);
  await tick();
  t.equal(m.started.length, 2, 'the failure was not reused: a new request');
  m.started[1]?.resolve(7);
  t.equal(await c, 7);
  // A start that throws synchronously is a failure like any other.
  await t.rejects(
    sf.run('z', () => {
      throw new Error('sync');
    }),
    /sync/,
  );
  t.equal(sf.size, 0);
});

t.test("one caller's cancellation ends only its wait; the request runs on for the others", async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const ac = new AbortController();
  const first = sf.run('x', m.start, ac.signal);
  const other = sf.run('x', m.start, new AbortController().signal);
  await tick();
  ac.abort(new Error('call cancelled by client'));
  const e: unknown = await first.catch((x: unknown) => x);
  t.ok(isCsiError(e, 'DeadlineExceeded'), 'the leaving caller gets DeadlineExceeded');
  t.match((e as Error).message, /^read x: cancelled while waiting for the answer: call cancelled by client/);
  t.equal(m.started[0]?.signal.aborted, false, 'the shared request is not aborted');
  m.started[0]?.resolve(5);
  t.equal(await other, 5, 'the other caller gets the answer');
});

t.test('a caller without a signal keeps the request alive', async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const ac = new AbortController();
  const a = sf.run('x', m.start, ac.signal);
  const b = sf.run('x', m.start);
  await tick();
  ac.abort();
  await t.rejects(a);
  t.equal(m.started[0]?.signal.aborted, false);
  m.started[0]?.resolve(1);
  t.equal(await b, 1);
});

t.test('when every caller has left, the shared request is aborted and forgotten', async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const a1 = new AbortController();
  const a2 = new AbortController();
  const p1 = sf.run('x', m.start, a1.signal);
  const p2 = sf.run('x', m.start, a2.signal);
  await tick();
  a1.abort();
  t.equal(m.started[0]?.signal.aborted, false, 'one caller still waits');
  a2.abort();
  await t.rejects(p1);
  await t.rejects(p2);
  t.equal(m.started[0]?.signal.aborted, true, 'nobody waits: the request is aborted');
  t.equal(sf.size, 0, 'and not joined by the next caller');
  const p3 = sf.run('x', m.start);
  await tick();
  t.equal(m.started.length, 2);
  m.started[0]?.reject(new Error('aborted'));
  m.started[1]?.resolve(9);
  t.equal(await p3, 9, "the aborted request's failure does not reach the new caller");
  const pre = new AbortController();
  pre.abort();
  await t.rejects(
    sf.run('x', m.start, pre.signal),
    /cancelled while waiting/,
    'an already-cancelled caller starts nothing',
  );
  t.equal(m.started.length, 2);
});

t.test('fresh starts a newer request, which later callers join', async (t) => {
  const sf = new SingleFlight<string, number>((k) => `read ${k}`);
  const m = manual<number>();
  const old = sf.run('x', m.start);
  const fresh = sf.run('x', m.start, undefined, true);
  const later = sf.run('x', m.start);
  await tick();
  t.equal(m.started.length, 2);
  m.started[0]?.resolve(1);
  t.equal(await old, 1);
  t.equal(sf.size, 1, "the older request's end does not forget the newer one");
  m.started[1]?.resolve(2);
  t.same(await Promise.all([fresh, later]), [2, 2]);
});
