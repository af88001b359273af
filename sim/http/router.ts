// Route table: `GET /nodes/{node}/qemu/{vmid}/config` style templates, matched per path segment.

import type { SimContext } from '../ops/context.js';
import type { Perms } from './auth.js';
import type { RouteSchema } from './params.js';

export interface RouteCtx {
  sim: SimContext;
  /** Validated parameters (path, query and body merged). */
  params: Record<string, string>;
  perms: Perms;
  /** `user@realm!token` or `user@realm` (ticket), the identity tasks are owned by; '' for world routes. */
  user: string;
}

/** A handler result with PVE's `total` attribute next to `data`. */
export class WithTotal {
  constructor(
    readonly data: unknown,
    readonly total: number,
  ) {}
}

export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  template: string;
  schema: RouteSchema;
  /** No authentication needed (pveproxy's exceptions: GET/POST /access/ticket). */
  world?: true;
  /** Permission check run before parameter validation (check_api2_permissions). */
  perm?: (perms: Perms, raw: Record<string, string>) => void;
  /** The result, or a Promise of it. */
  handler: (rc: RouteCtx) => unknown;
}

export interface Match {
  route: Route;
  pathParams: Record<string, string>;
}

export function routeKey(route: Route): string {
  return `${route.method} ${route.template}`;
}

export class Router {
  private compiled: Array<{ route: Route; parts: string[] }> = [];

  add(...routes: Route[]): this {
    for (const r of routes) this.compiled.push({ route: r, parts: r.template.split('/').filter(Boolean) });
    return this;
  }

  /**
   * Matches a relative API path (below /api2/json) given as raw segments; each is URI-decoded on
   * its own so an encoded `/` inside a volume name cannot change the route.
   */
  match(method: string, relPath: string): Match | undefined {
    const segs = relPath
      .split('/')
      .filter((s, i, a) => s !== '' || (i > 0 && i < a.length - 1))
      .map((s) => {
        try {
          return decodeURIComponent(s);
        } catch {
          return s;
        }
      });
    for (const { route, parts } of this.compiled) {
      if (route.method !== method || parts.length !== segs.length) continue;
      const pathParams: Record<string, string> = {};
      const ok = parts.every((p, i) => {
        const seg = segs[i];
        if (seg === undefined) return false;
        if (!p.startsWith('{')) return p === seg;
        pathParams[p.slice(1, -1)] = seg;
        return true;
      });
      if (ok) return { route, pathParams };
    }
    return undefined;
  }

  routes(): Route[] {
    return this.compiled.map((c) => c.route);
  }
}
