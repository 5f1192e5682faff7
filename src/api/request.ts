/**
 * The request pipeline: what every request passes through around its route, in the order app.ts
 * mounts it (outermost first), then the helpers every route module gets (`RouteContext`).
 *   1. observe: counts and times the request into the /metrics registry (metrics.ts);
 *   2. security: the Host and Origin headers, then the bearer token;
 *   3. limits: the per-token rate limit, then the body size limit;
 *   4. fair share: a slot in the round robin between sessions (observe/act routes only);
 *   5. generation: an expected generation in the query or header, its one check
 *      (`checkGeneration`; a route checks one given in its body with the same function).
 * A request no route matches ends in `notFoundOr405`. Each stage is a few lines over the same
 * Hono context, none is used outside the pipeline, and read top to bottom they are the order a
 * request meets them. (Idempotency of POST /v1/sessions is the create route's, in idempotency.ts.)
 */
import type { Readable } from 'node:stream';
import { timingSafeEqual } from 'node:crypto';
import type { Context, Hono, MiddlewareHandler } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import type { DaemonConfig } from '../common/config.ts';
import { drainBody } from '../common/drain.ts';
import { DrumsError } from '../common/errors.ts';
import { DisplayError } from '../display/errors.ts';
import type { Session as SessionView } from '../protocol/generated/types.ts';
import type { DisplayService } from '../session/display-service.ts';
import { FAIR_RETRY_AFTER_S, type FairScheduler } from '../policy/fair-share.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import type { VncServers } from '../session/vnc-server.ts';
import type { PoolManager } from '../pools/pools.ts';
import { metrics } from './metrics.ts';
import type { UiLogins } from './ui-login.ts';

const ID_RE = /^s[0-9a-f]{10}$/;

// ─── 1. observe ───

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

// ─── 2. security ───

/** Routes anyone on loopback may read without the token (nothing secret in them). */
const PUBLIC = new Set(['/healthz', '/openapi.json', '/docs']);
/** Routes the dashboard calls with an Origin header (its same-origin GETs carry none). */
const DASHBOARD_ORIGIN_ROUTES = /^\/v1\/sessions\/s[0-9a-f]{10}\/(stream|takeover)$/;

/**
 * Host and Origin checks, then the bearer token (or the dashboard's login cookie, src/api/ui-login.ts), before anything else.
 * - Host must be a loopback name or the listen address (DNS rebinding defence).
 * - Any Origin header is refused: browsers send one on every cross-origin
 *   fetch, and no web page may drive the daemon, with one exception: the
 *   daemon's own origin (its dashboard, /ui) on the stream and take-over
 *   routes (the Host check above pins that origin to the daemon).
 */
export function security(opts: { token: string; allowedHosts: string[]; logins?: UiLogins }): MiddlewareHandler {
  const tokenBuf = Buffer.from(opts.token);
  return async (c, next) => {
    const host = (c.req.header('host') ?? '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    if (!opts.allowedHosts.includes(host))
      throw new DrumsError('forbidden_host', `Host '${host.slice(0, 100)}' is not allowed; use one of ${opts.allowedHosts.join(', ')}`);
    // The one page allowed to call the daemon is its own dashboard (/ui): its own origin, and
    // only on the routes a browser sends an Origin to (WebSocket, POST/DELETE take-over).
    const origin = c.req.header('origin');
    const ownOrigin = `http://${c.req.header('host')}`;
    if (origin !== undefined && !(origin === ownOrigin && DASHBOARD_ORIGIN_ROUTES.test(c.req.path))) {
      throw new DrumsError(
        'forbidden_origin',
        "requests from web pages are refused (an Origin header was sent); only the daemon's own dashboard may open streams and take sessions over",
      );
    }
    if (PUBLIC.has(c.req.path) && c.req.method === 'GET') return next();
    const auth = c.req.header('authorization');
    if (auth === undefined && c.req.method === 'GET' && c.req.path === '/ui') {
      // Opening the dashboard: a one-time code from `drums ui` buys a cookie, then 303 to a URL without it.
      if (c.req.query('token') !== undefined)
        throw new DrumsError('unauthorized', 'the token is no longer accepted in a URL (browser history keeps it): run `drums ui` for a one-time login link');
      const code = c.req.query('code');
      if (code !== undefined) {
        const login = opts.logins?.redeem(code);
        if (!login)
          throw new DrumsError(
            'unauthorized',
            'this login link was used already or has expired (a code works once, within 60 s): run `drums ui` for a new one',
          );
        return c.body(null, 303, {
          location: '/ui',
          'set-cookie': opts.logins!.setCookie(login),
          'cache-control': 'no-store',
          'referrer-policy': 'no-referrer',
        });
      }
    }
    if (auth === undefined && opts.logins) {
      const h = { cookie: c.req.header('cookie'), secFetchSite: c.req.header('sec-fetch-site'), origin, ownOrigin, method: c.req.method, path: c.req.path };
      if (opts.logins.authenticates(h)) return next();
    }
    const given = Buffer.from(auth?.startsWith('Bearer ') ? auth.slice(7) : '');
    if (given.length !== tokenBuf.length || !timingSafeEqual(given, tokenBuf)) {
      throw new DrumsError(
        'unauthorized',
        'missing or wrong bearer token (Authorization: Bearer <token>; see DRUMS_TOKEN or <state dir>/token); for the dashboard, run `drums ui`',
      );
    }
    return next();
  };
}

// ─── 3. limits ───

/** 413 payload_too_large for bodies over `maxBytes`, by Content-Length or while streaming a chunked body. */
export function bodyLimit(maxBytes: number): MiddlewareHandler {
  const limit = honoBodyLimit({
    maxSize: maxBytes,
    onError: () => {
      throw new DrumsError('payload_too_large', `request body is over ${maxBytes} bytes`, { details: { limit: maxBytes } });
    },
  });
  return async (c, next) => {
    const len = c.req.header('content-length');
    if (len !== undefined && Number(len) > maxBytes) {
      // Note: read and discard the refused body before answering. A client still writing it
      // would otherwise hit EPIPE and never see the 413: the server gives an unread body only
      // 500 ms after the response before it closes the socket, too little on a loaded host.
      const incoming = (c.env as { incoming?: Readable } | undefined)?.incoming;
      if (incoming) await drainBody(incoming, { maxBytes: DRAIN_MAX_BYTES, maxMs: Number(len) <= DRAIN_MAX_BYTES ? DRAIN_TIMEOUT_MS : 0 });
      throw new DrumsError('payload_too_large', `request body is over ${maxBytes} bytes`, { details: { limit: maxBytes } });
    }
    return limit(c, next);
  };
}

const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
const DRAIN_TIMEOUT_MS = 15_000;

export interface RateLimitOptions {
  /** Sustained requests per second per token (0 = no limit). */
  perSecond: number;
  /** Bucket size: how many requests may come at once. */
  burst: number;
}

/** From the config's DRUMS_RATE_LIMIT and DRUMS_RATE_BURST (default twice the rate). */
export function rateLimitOf(c: Pick<DaemonConfig, 'rateLimit' | 'rateBurst'>): RateLimitOptions {
  return { perSecond: c.rateLimit, burst: c.rateBurst ?? Math.max(1, c.rateLimit * 2) };
}

/** A token bucket per bearer token (runs after authentication): 429 rate_limited with Retry-After. */
export function rateLimit(opts: RateLimitOptions): MiddlewareHandler {
  const buckets = new Map<string, { tokens: number; at: number }>();
  return async (c, next) => {
    if (!opts.perSecond) return next();
    const who = c.req.header('authorization') ?? '';
    const now = performance.now();
    let b = buckets.get(who);
    if (!b) {
      if (buckets.size > 1024) buckets.clear();
      buckets.set(who, (b = { tokens: opts.burst, at: now }));
    }
    b.tokens = Math.min(opts.burst, b.tokens + ((now - b.at) / 1000) * opts.perSecond);
    b.at = now;
    if (b.tokens < 1) {
      const wait = Math.ceil((1 - b.tokens) / opts.perSecond);
      c.header('retry-after', String(Math.max(1, wait)));
      throw new DrumsError('rate_limited', `more than ${opts.perSecond} requests/s (burst ${opts.burst}) for this token; retry after ${Math.max(1, wait)} s`, {
        details: { perSecond: opts.perSecond, burst: opts.burst },
      });
    }
    b.tokens -= 1;
    return next();
  };
}

// ─── 4. fair share ───

/**
 * The observe/act routes of a session wait for their turn in the daemon's fair share between
 * sessions (src/policy/fair-share.ts; one scheduler with the OSWorld guest routes). A refusal
 * (the session's queue is full) is 429 rate_limited with Retry-After.
 * Exec (whose work runs in the session's own cgroup, and may take long) takes no slot: a session
 * may have at most DRUMS_FAIR_QUEUE of them in flight (`FairScheduler.bounded`). Streams are not queued.
 */
const QUEUED = /^\/v1\/sessions\/([^/]+)\/(screenshot|actions|a11y|windows|files|terminal|exec)(\/|$)/;

export function fairShare(sched: FairScheduler): MiddlewareHandler {
  return async (c, next) => {
    const m = QUEUED.exec(c.req.path);
    if (!m || (m[2] === 'actions' && c.req.query('stream'))) return next();
    // The key only groups requests: a malformed escape (%ff) keys on the raw id, and the route answers it.
    let id = m[1]!;
    try {
      id = decodeURIComponent(id);
    } catch {}
    try {
      await (m[2] === 'exec' ? sched.bounded(id, () => next()) : sched.run(id, () => next()));
    } catch (e) {
      if (e instanceof DrumsError && e.code === 'rate_limited') c.header('retry-after', String(FAIR_RETRY_AFTER_S));
      throw e;
    }
  };
}

// ─── 5. generation ───

const SESSION_PATH = /^\/v1\/sessions\/([^/]+)(\/.*)?$/;

function sessionIdOf(path: string): string | undefined {
  const m = SESSION_PATH.exec(path);
  return m && ID_RE.test(m[1]!) ? m[1] : undefined;
}

/**
 * For every route under /v1/sessions/:id:
 * - an expected generation in the query or the `x-drums-generation` request
 *   header is checked here, once, before the route runs (409 stale_generation /
 *   session_resetting), on reset and delete too. Routes check only a generation
 *   given in their own body (actions, reset);
 * - the response carries the session's current generation in `x-drums-generation`.
 */
export function sessionGeneration(ctx: RouteContext): MiddlewareHandler {
  return async (c, next) => {
    const id = sessionIdOf(c.req.path);
    const s = id ? ctx.mgr.list().find((x) => x.id === id) : undefined;
    if (s) {
      try {
        checkGeneration(c, s);
      } catch (e) {
        c.header('x-drums-generation', String(s.generation));
        throw e;
      }
    }
    await next();
    if (s && ctx.mgr.list().includes(s) && !c.res.headers.has('x-drums-generation')) {
      try {
        c.res.headers.set('x-drums-generation', String(s.generation));
      } catch {
        /* immutable headers */
      }
    }
  };
}

/**
 * Checks an optional expected generation (`fromBody`, else the query `generation` or the
 * `x-drums-generation` header): 409 stale_generation when it is not the session's, 409
 * session_resetting while the session resets.
 */
export function checkGeneration(c: Context, s: Session, fromBody?: unknown): void {
  const raw = fromBody ?? c.req.query('generation') ?? c.req.header('x-drums-generation');
  if (raw === undefined || raw === null) return;
  const g = typeof raw === 'number' ? raw : Number(raw);
  if (!Number.isInteger(g) || g < 1)
    throw new DrumsError('invalid_request', `generation: must be a positive integer, got ${JSON.stringify(raw)}`, { details: { field: 'generation' } });
  if (s.state === 'resetting')
    throw new DrumsError('session_resetting', `session ${s.id} is resetting to generation ${s.generation}`, { details: { generation: s.generation } });
  if (g !== s.generation) {
    throw new DrumsError('stale_generation', `generation ${g} is stale; session ${s.id} is at generation ${s.generation}`, {
      details: { expected: g, current: s.generation },
    });
  }
}

// ─── the end of the line: no route ───

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

// ─── what every route module gets ───

/** What every route module gets: the manager, the display service and request helpers. */
export interface RouteContext {
  mgr: SessionManager;
  display: DisplayService;
  /** The daemon's fair share between sessions (src/policy/fair-share.ts), shared with the OSWorld guest routes. */
  fair: FairScheduler;
  /** The warm pools (src/pools/pools.ts), built by the daemon. */
  pools: PoolManager;
  /** The sessions' on-demand x11vnc servers (src/session/vnc-server.ts), built by the daemon. */
  vnc: VncServers;
  maxBodyBytes: number;
  /** The public view of a session (with the fields features add through `AppOptions.viewExtras`). */
  view(s: Session): SessionView;
  /** The request body as JSON ({} when empty); 400 invalid_json / 413 on bad input. */
  body(c: Context): Promise<unknown>;
  /** The session named by `:id`, or 404 session_not_found. */
  session(c: Context): Session;
  /** Throws 409 session_resetting / session_broken unless the session is ready. */
  usable(s: Session): void;
  /**
   * The session named by `:id`, ready. An expected generation in the query or header was checked
   * once, by the pipeline; one in the body (`fromBody`) is checked here.
   */
  ready(c: Context, fromBody?: unknown): Session;
  /**
   * Checks an optional expected generation (query `generation` or header
   * `x-drums-generation`): a stale one gets 409 stale_generation.
   */
  checkGeneration(c: Context, s: Session, fromBody?: unknown): void;
}

export function createRouteContext(
  mgr: SessionManager,
  display: DisplayService,
  services: { fair: FairScheduler; pools: PoolManager; vnc: VncServers },
  maxBodyBytes: number,
  view: (s: Session) => SessionView,
): RouteContext {
  const session = (c: Context): Session => {
    const id = c.req.param('id') ?? '';
    if (!ID_RE.test(id)) throw new DrumsError('session_not_found', `no session '${id.slice(0, 64)}' (ids look like s0123456789)`);
    // A session waiting unclaimed in a warm pool does not exist for clients (the registry's lookup).
    return mgr.lookup(id);
  };
  return {
    mgr,
    display,
    ...services,
    maxBodyBytes,
    view,
    async body(c) {
      const text = await c.req.text();
      if (Buffer.byteLength(text) > maxBodyBytes) throw new DrumsError('payload_too_large', `request body is over ${maxBodyBytes} bytes`);
      if (!text.trim()) return {};
      try {
        return JSON.parse(text);
      } catch (e) {
        throw new DrumsError('invalid_json', `request body is not valid JSON: ${(e as Error).message}`);
      }
    },
    session,
    usable: (s) => mgr.requireReady(s),
    ready(c, fromBody) {
      const s = session(c);
      if (fromBody !== undefined && fromBody !== null) checkGeneration(c, s, fromBody);
      mgr.requireReady(s);
      return s;
    },
    checkGeneration,
  };
}

/** A display-layer call, its error rethrown with JSON-safe details (no image buffers, no socket path). */
export async function displayCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof DisplayError)) throw e;
    const d = { ...(e.details ?? {}) } as Record<string, unknown>;
    if (Array.isArray(d.results)) {
      d.completed = d.results.length;
      delete d.results;
    }
    delete d.socketPath;
    throw new DrumsError(e.code, e.message, { details: d, cause: e });
  }
}
