// /nodes/{node}/tasks (the node's task list), …/{upid}/status and …/log. A task is only found on
// the node that ran it, and another user's task needs Sys.Audit on the node.

import { paramError } from '../http/errors.js';
import type { Perms } from '../http/auth.js';
import { NODE, VMID, splitList } from '../http/params.js';
import { type Route, WithTotal } from '../http/router.js';
import { type Task, UPID_RE } from '../tasks.js';
import type { SimContext } from '../ops/context.js';
import { defined } from '../defined.js';

function findTask(sim: SimContext, node: string, upid: string, perms: Perms, user: string): Task {
  if (!UPID_RE.test(upid)) throw paramError({ upid: 'unable to parse worker upid' });
  const task = sim.tasks.get(upid);
  if (!task || task.node !== node) throw paramError({ upid: 'no such task' });
  if (!ownTask(owner(task), user)) perms.check(`/nodes/${node}`, ['Sys.Audit']);
  return task;
}

/** The fields every task listing decodes from the UPID, in Tasks.pm's order. */
function upidFields(t: Task): Pick<Task, 'upid' | 'node' | 'pid' | 'pstart' | 'starttime' | 'type' | 'id'> {
  return { upid: t.upid, node: t.node, pid: t.pid, pstart: t.pstart, starttime: t.starttime, type: t.type, id: t.id };
}

/** Token tasks are reported with the user and the token name split, as Tasks.pm does. */
function owner(task: Task): { user: string; tokenid?: string } {
  const i = task.user.indexOf('!');
  return i < 0 ? { user: task.user } : { user: task.user.slice(0, i), tokenid: task.user.slice(i + 1) };
}

/** Who may see a task without Sys.Audit (Tasks.pm $check_task_user): a token only its own, a user its tokens' too. */
function ownTask(row: { user: string; tokenid?: string | undefined }, caller: string): boolean {
  if (row.tokenid !== undefined) return caller === `${row.user}!${row.tokenid}` || caller === row.user;
  return caller === row.user;
}

/** PVE::UPID::normalize_status_type */
function statusType(status: string | undefined): 'ok' | 'warning' | 'error' | 'unknown' {
  if (!status) return 'unknown';
  if (status === 'OK') return 'ok';
  if (/^WARNINGS: \d+$/.test(status)) return 'warning';
  if (status === 'unexpected status') return 'unknown';
  return 'error';
}

/**
 * GET /nodes/{node}/tasks as pve-manager's PVE::API2::Tasks node_tasks answers it. `source=active`
 * reads the node's active-workers file: running tasks, decoded from their UPID only, so a token's
 * task carries the whole token id as `user` (no `tokenid` split), with status RUNNING. The archive
 * (the default) lists finished tasks, newest first, with `endtime`, the exit status as `status`
 * and a token's user split into `user` and `tokenid`. A task that ended is archived at once here
 * (pvedaemon's reaper does it when the worker exits).
 */
function listTasks(sim: SimContext, params: Record<string, string>, perms: Perms, user: string): WithTotal {
  const node = params.node ?? '';
  const start = Number(params.start ?? 0);
  let limit = Number(params.limit ?? 50);
  const source = params.source ?? 'archive';
  const errors = params.errors === '1';
  const since = params.since === undefined ? undefined : Number(params.since);
  const until = params.until === undefined ? undefined : Number(params.until);
  const statusFilter = { ok: true, warning: true, error: true, unknown: true };
  if (params.statusfilter !== undefined && !errors) {
    for (const k of Object.keys(statusFilter) as Array<keyof typeof statusFilter>) statusFilter[k] = false;
    for (const f of splitList(params.statusfilter)) {
      const k = f.toLowerCase();
      if (k in statusFilter) statusFilter[k as keyof typeof statusFilter] = true;
    }
  } else if (errors) {
    statusFilter.ok = false;
  }
  const auditor = perms.has('Sys.Audit');
  let count = 0;
  // Tasks.pm's $filter_task, in its order: `count` counts every match, `limit` what is returned.
  const skip = (row: {
    user: string;
    tokenid?: string | undefined;
    type: string;
    id: string;
    starttime: number;
    status?: string | undefined;
  }): boolean => {
    if (params.userfilter && !row.user.toLowerCase().includes(params.userfilter.toLowerCase())) return true;
    if (!(auditor || ownTask(row, user))) return true;
    if (params.typefilter && row.type !== params.typefilter) return true;
    if (params.vmid && (!row.id || row.id !== params.vmid)) return true;
    if (since !== undefined && row.starttime < since) return true;
    if (until !== undefined && row.starttime > until) return true;
    if (!statusFilter[statusType(row.status)]) return true;
    if (count++ < start) return true;
    if (limit <= 0) return true;
    return false;
  };
  const onNode = sim.tasks.list().filter((t) => t.node === node);
  const out: Record<string, unknown>[] = [];
  if (source === 'active' || source === 'all') {
    for (const t of onNode.filter((x) => x.status === 'running')) {
      const row = { ...upidFields(t), user: t.user, saved: '0' };
      if (skip(row)) continue;
      out.push({ ...row, status: 'RUNNING' });
      limit--;
    }
  }
  if (source !== 'active') {
    const finished = onNode.filter((x) => x.status === 'stopped').sort((a, b) => (b.endtime ?? 0) - (a.endtime ?? 0));
    for (const t of finished) {
      const row = { ...upidFields(t), ...owner(t), endtime: t.endtime, status: t.exitstatus };
      if (skip(row)) continue;
      out.push(row);
      limit--;
    }
  }
  return new WithTotal(out, count);
}

export const taskRoutes: Route[] = [
  {
    method: 'GET',
    template: '/nodes/{node}/tasks',
    schema: {
      properties: {
        node: NODE,
        start: { type: 'integer', optional: true, minimum: 0 },
        limit: { type: 'integer', optional: true, minimum: 0 },
        userfilter: { type: 'string', optional: true },
        typefilter: { type: 'string', optional: true },
        vmid: { ...VMID, optional: true },
        errors: { type: 'boolean', optional: true },
        source: { type: 'string', optional: true, enum: ['archive', 'active', 'all'] },
        since: { type: 'integer', optional: true },
        until: { type: 'integer', optional: true },
        statusfilter: {
          type: 'string',
          optional: true,
          pattern: /(?:ok|warning|error|unknown)(?:[,;\s]+(?:ok|warning|error|unknown))*/,
        },
      },
    },
    handler: ({ sim, params, perms, user }) => listTasks(sim, params, perms, user),
  },
  {
    method: 'GET',
    template: '/nodes/{node}/tasks/{upid}/status',
    schema: { properties: { node: NODE, upid: { type: 'string' } } },
    handler: ({ sim, params, perms, user }) => {
      const t = findTask(sim, defined(params.node, 'node'), defined(params.upid, 'upid'), perms, user);
      const out: Record<string, unknown> = { ...upidFields(t), ...owner(t), status: t.status };
      if (t.status === 'stopped') out.exitstatus = t.exitstatus;
      return out;
    },
  },
  {
    method: 'GET',
    template: '/nodes/{node}/tasks/{upid}/log',
    schema: {
      properties: {
        node: NODE,
        upid: { type: 'string' },
        start: { type: 'integer', optional: true, minimum: 0 },
        limit: { type: 'integer', optional: true, minimum: 0 },
        download: { type: 'boolean', optional: true },
      },
    },
    handler: ({ sim, params, perms, user }) => {
      const t = findTask(sim, defined(params.node, 'node'), defined(params.upid, 'upid'), perms, user);
      const start = Number(params.start ?? 0);
      const limit = Number(params.limit ?? 50);
      const lines = t.lines.length ? t.lines : ['no content'];
      const page = lines.slice(start, start + limit).map((text, i) => ({ n: start + i + 1, t: text }));
      return new WithTotal(page, lines.length);
    },
  },
];
