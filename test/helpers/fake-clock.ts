// A fake clock for tests whose code waits (poll intervals, backoff, deadlines): setTimeout,
// setInterval and Date are faked, and the clock jumps to the next timer whenever the process
// waits on nothing but timers, so a 15 s deadline with 500 ms polls runs in milliseconds and in
// the same order as with real time. While real I/O is under way (a child process a fake runs for
// real, a file read) the clock stands still, so a timeout raced against that I/O cannot fire early.
import { install, type Clock } from '@sinonjs/fake-timers';

import type { Teardown } from './teardown.js';

/** Real I/O in flight, by kind (timers and immediates are not I/O). */
function ioInFlight(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) {
    if (kind !== 'Timeout' && kind !== 'Immediate') counts.set(kind, (counts.get(kind) ?? 0) + 1);
  }
  return counts;
}

/** Installs the clock for the rest of this test (call it inside the test, so tap's own timer for the test stays real). */
export function fakeClock(t: Teardown): Clock {
  // What is open before the test starts (stdout, tap's channel) is not the test's I/O.
  const idle = ioInFlight();
  const realTimeout = globalThis.setTimeout;
  const clock = install({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
  let stopped = false;
  const step = () => {
    if (stopped) return;
    const waitingOnIo = [...ioInFlight()].some(([kind, n]) => n > (idle.get(kind) ?? 0));
    if (!waitingOnIo && clock.countTimers() > 0) {
      clock.next();
      setImmediate(step); // let what the timer started run before the next jump
    } else {
      realTimeout(step, 1);
    }
  };
  setImmediate(step);
  t.teardown(() => {
    stopped = true;
    clock.uninstall();
  });
  return clock;
}
