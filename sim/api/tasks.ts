// /nodes/{node}/tasks/{upid}/status and …/log. A task is only found on the node that ran it, and
// another user's task needs Sys.Audit on the node.

import { paramError } from '../http/errors.js';
import type { Perms } from '../http/auth.js';
import { NODE } from '../http/params.js';
import { type Route, WithTotal } from '../http/router.js';
import { type Task, UPID_RE } from '../tasks.js';
import type { SimContext } from '../ops/context.js';

function findTask(sim: SimContext, node: string, upid: string, perms: Perms, user: string): Task {
  if (!UPID_RE.test(upid)) throw paramError({ upid: 'unable to parse worker upid' });
  const task = sim.tasks.get(upid);
  if (!task || task.node !== node) throw paramError({ upid: 'no such task' });
  if (task.user !== user) perms.check(`/nodes/${node}`, ['Sys.Audit']);
  return task;
}

/** Token tasks are reported with the user and the token name split, as Tasks.pm does. */
function owner(task: Task): { user: string; tokenid?: string } {
  const i = task.user.indexOf('!');
  return i < 0 ? { user: task.user } : { user: task.user.slice(0, i), tokenid: task.user.slice(i + 1) };
}

export const taskRoutes: Route[] = [
  {
    method: 'GET', template: '/nodes/{node}/tasks/{upid}/status',
    schema: { properties: { node: NODE, upid: { type: 'string' } } },
    handler: ({ sim, params, perms, user }) => {
      const t = findTask(sim, params.node!, params.upid!, perms, user);
      const out: Record<string, unknown> = {
        upid: t.upid, node: t.node, pid: t.pid, pstart: t.pstart, starttime: t.starttime, type: t.type,
        id: t.id, ...owner(t), status: t.status,
      };
      if (t.status === 'stopped') out.exitstatus = t.exitstatus;
      return out;
    },
  },
  {
    method: 'GET', template: '/nodes/{node}/tasks/{upid}/log',
    schema: {
      properties: {
        node: NODE, upid: { type: 'string' },
        start: { type: 'integer', optional: true, minimum: 0 },
        limit: { type: 'integer', optional: true, minimum: 0 },
        download: { type: 'boolean', optional: true },
      },
    },
    handler: ({ sim, params, perms, user }) => {
      const t = findTask(sim, params.node!, params.upid!, perms, user);
      const start = Number(params.start ?? 0);
      const limit = Number(params.limit ?? 50);
      const lines = t.lines.length ? t.lines : ['no content'];
      const page = lines.slice(start, start + limit).map((text, i) => ({ n: start + i + 1, t: text }));
      return new WithTotal(page, lines.length);
    },
  },
];
