import type { Context, Hono, MiddlewareHandler } from 'hono';
import { metrics } from '../metrics.ts';

/** The operation a request is, for the latency histograms (undefined = not timed). */
function opOf(method: string, path: string): string | undefined {
  if (method === 'POST' && path === '/v1/sessions') return 'create';
  const m = /^\/v1\/sessions\/[^/]+\/([a-z]+)$/.exec(path);
  if (!m) return undefined;
  if (method === 'POST' && m[1] === 'reset') return 'reset';
  if (method === 'POST' && m[1] === 'exec') return 'exec';
  if (method === 'POST' && m[1] === 'actions') return 'action';
  if (method === 'GET' && m[1] === 'screenshot') return 'screenshot';
  return undefined;
}

/** A bounded route label: session ids become `:id`. */
function routeOf(path: string): string {
  const parts = path.split('/');
  if (parts[1] === 'v1' && parts[2] === 'sessions' && parts.length > 3) parts[3] = ':id';
  return parts.slice(0, 6).join('/').slice(0, 80);
}

/** Counts every request and error code, and times the operations the histograms cover. */
export function observe(): MiddlewareHandler {
  return async (c, next) => {
    const t0 = performance.now();
    await next();
    const status = c.res.status;
    // A create answered from a warm pool (x-drums-pool) is timed as a claim.
    const op = opOf(c.req.method, c.req.path) === 'create' && c.res.headers.has('x-drums-pool') ? 'claim' : opOf(c.req.method, c.req.path);
    if (op && status < 400) metrics.ops.observe({ op }, (performance.now() - t0) / 1000);
    if (op === 'create' && status === 201) metrics.creates.inc();
    if (op === 'reset' && status === 200) metrics.resets.inc();
    if (c.req.method === 'DELETE' && status === 204) metrics.destroys.inc({ reason: 'requested' });
    let code: string | undefined;
    if (status >= 400 && (c.res.headers.get('content-type') ?? '').includes('json')) {
      try {
        code = ((await c.res.clone().json()) as { error?: { code?: string } }).error?.code;
      } catch {}
      if (code) metrics.errors.inc({ code: code.slice(0, 40) });
    }
    metrics.requests.inc({ method: c.req.method.slice(0, 10), route: code === 'not_found' ? 'unmatched' : routeOf(c.req.path), status: String(status) });
  };
}

/**
 * notFound handler: a path that some route serves with another method is a
 * 405 method_not_allowed (with Allow), anything else 404 not_found. Works for
 * every route module, including ones added later.
 */
export function notFoundOr405(app: Hono) {
  const cache = new Map<string, RegExp>();
  const re = (path: string) => {
    let r = cache.get(path);
    if (!r)
      cache.set(
        path,
        (r = new RegExp(
          '^' +
            path
              .split('/')
              .map((seg) => (seg.startsWith(':') ? '[^/]+' : seg === '*' ? '.*' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
              .join('/') +
            '/?$',
        )),
      );
    return r;
  };
  return (c: Context) => {
    const allowed = new Set<string>();
    for (const r of app.routes) {
      if (r.method === 'ALL' || r.path.endsWith('*')) continue;
      if (re(r.path).test(c.req.path)) allowed.add(r.method);
    }
    if (allowed.size && !allowed.has(c.req.method)) {
      if (allowed.has('GET')) allowed.add('HEAD');
      return c.json(
        {
          error: {
            code: 'method_not_allowed',
            message: `${c.req.method} is not allowed on ${c.req.path.slice(0, 200)}; allowed: ${[...allowed].join(', ')}`,
            details: { allowed: [...allowed] },
          },
        },
        405,
        { allow: [...allowed].join(', ') },
      );
    }
    return c.json({ error: { code: 'not_found', message: `no route ${c.req.method} ${c.req.path.slice(0, 200)}; see GET /openapi.json` } }, 404);
  };
}
