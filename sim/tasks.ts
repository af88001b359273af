// Worker tasks with Proxmox UPIDs. A task runs asynchronously, logs lines like fork_worker does and
// ends with `TASK OK`, `TASK WARNINGS: n` or `TASK ERROR: <one line>`, which is what `exitstatus`
// reports.

import type { FaultState } from './faults.js';
import { taskErrorText } from './http/errors.js';
import { sleep } from './locks.js';

export interface TaskLog {
  print(line: string): void;
  /** A Perl `warn` inside a worker: logged as `WARN: …` and counted. */
  warn(line: string): void;
}

export interface Task {
  upid: string;
  node: string;
  pid: number;
  pstart: number;
  starttime: number;
  type: string;
  id: string;
  /** `user@realm!token` as in the UPID. */
  user: string;
  status: 'running' | 'stopped';
  exitstatus?: string;
  /** Epoch seconds the task ended (what the archive index records). */
  endtime?: number;
  lines: string[];
  done: Promise<void>;
}

export function encodeUpid(t: Pick<Task, 'node' | 'pid' | 'pstart' | 'starttime' | 'type' | 'id' | 'user'>): string {
  const hex = (n: number) => n.toString(16).toUpperCase().padStart(8, '0');
  return `UPID:${t.node}:${hex(t.pid)}:${hex(t.pstart)}:${hex(t.starttime)}:${t.type}:${t.id}:${t.user}:`;
}

export const UPID_RE =
  /^UPID:([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s]+):([^:\s]*):([^:\s]+):$/;

/** Whether an exitstatus means failure (PVE::Tools::upid_status_is_error). */
export const statusIsError = (s: string) => !(s === 'OK' || /^WARNINGS: \d+$/.test(s));

export class TaskRegistry {
  private tasks = new Map<string, Task>();
  private nextPid = 0x3a000 + Math.floor(Math.random() * 0x1000);
  private readonly bootTicks = 100 * 3600; // pretend the hosts booted an hour before the simulator

  constructor(
    private readonly faults: FaultState,
    private readonly onEnd?: (t: Task) => void,
  ) {}

  start(node: string, type: string, id: string, user: string, body: (log: TaskLog) => Promise<void>): Task {
    const started = Date.now();
    const pid = this.nextPid++;
    const base = {
      node,
      pid,
      pstart: this.bootTicks + Math.floor(process.uptime() * 100),
      starttime: Math.floor(started / 1000),
      type,
      id,
      user,
    };
    const task: Task = { ...base, upid: encodeUpid(base), status: 'running', lines: [], done: Promise.resolve() };
    let warnings = 0;
    const log: TaskLog = {
      print: (line) => task.lines.push(...line.replace(/\n$/, '').split('\n')),
      warn: (line) => {
        warnings++;
        task.lines.push(`WARN: ${line.replace(/\n$/, '')}`);
      },
    };
    const failure = this.faults.shouldFailTask();
    const failMessage = this.faults.get().taskFailMessage;
    const minDuration = this.faults.get().taskDurationMs;
    task.done = (async () => {
      // yield first so the caller receives the UPID before anything happens, like a forked worker
      await sleep(0);
      let error: string | undefined;
      try {
        if (failure === 'before') throw new Error(failMessage);
        await body(log);
        if (failure === 'after') throw new Error(failMessage);
      } catch (e) {
        error = taskErrorText(e);
      }
      const remaining = minDuration - (Date.now() - started);
      if (remaining > 0) await sleep(remaining);
      if (error !== undefined) {
        task.lines.push(`TASK ERROR: ${error}`);
        task.exitstatus = error;
      } else if (warnings > 0) {
        task.lines.push(`TASK WARNINGS: ${warnings}`);
        task.exitstatus = `WARNINGS: ${warnings}`;
      } else {
        task.lines.push('TASK OK');
        task.exitstatus = 'OK';
      }
      task.endtime = Math.floor(Date.now() / 1000);
      task.status = 'stopped';
      this.onEnd?.(task);
    })();
    this.tasks.set(task.upid, task);
    return task;
  }

  get(upid: string): Task | undefined {
    return this.tasks.get(upid);
  }

  list(): Task[] {
    return [...this.tasks.values()];
  }

  /**
   * Waits up to `ms` for a task (the `background_delay`/`delay` parameters): its exit status, or
   * undefined while it still runs.
   */
  async waitFor(task: Task, ms: number): Promise<string | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((r) => {
      timer = setTimeout(() => r(undefined), ms);
    });
    const exitstatus = await Promise.race([task.done.then(() => task.exitstatus), timeout]);
    clearTimeout(timer);
    return exitstatus;
  }

  async drain(): Promise<void> {
    await Promise.allSettled(this.list().map((t) => t.done));
  }

  clear(): void {
    this.tasks.clear();
  }
}
