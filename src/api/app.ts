import { Hono } from 'hono';
import { DrumsError } from '../common/errors.ts';
import { log } from '../common/log.ts';
import type { SessionManager } from '../session/manager.ts';
import { sessionRoutes, sessionView, type ViewExtras } from './routes/sessions.ts';
import { observeRoutes } from './routes/observe.ts';
import { actionRoutes } from './routes/actions.ts';
import { windowRoutes } from './routes/windows.ts';
import { execRoutes } from './routes/exec.ts';
import { fileRoutes } from './routes/files.ts';
import { errorBody, statusFor } from './errors.ts';
import type { DisplayService } from '../session/display-service.ts';
import { FairScheduler, fairShareOf } from '../policy/fair-share.ts';
import { PoolManager } from '../pools/pools.ts';
import { VncServers } from '../session/vnc-server.ts';
import { FIELDS } from '../common/config.ts';
import {
  bodyLimit,
  createRouteContext,
  fairShare,
  notFoundOr405,
  observe,
  type RateLimitOptions,
  rateLimit,
  rateLimitOf,
  security,
  sessionGeneration,
} from './request.ts';
import { idempotency } from './idempotency.ts';
import { type CpuGuardView, metaRoutes } from './routes/meta.ts';
import { eventRoutes } from './routes/events.ts';
import { hostRoutes } from './routes/host.ts';
import { frameRoutes } from './frames/index.ts';
import { takeoverExtras } from './frames/takeover.ts';
import { poolRoutes } from './routes/pools.ts';
import { forkRoutes } from './routes/fork.ts';
import { episodeRoutes } from './routes/episodes.ts';
import { specBodies } from './spec-validate.ts';
import { UiLogins, uiLoginRoutes } from './ui-login.ts';

export interface AppOptions {
  token: string;
  /** Host names accepted in the Host header (DNS-rebinding defence). */
  allowedHosts: string[];
  maxBodyBytes?: number;
  /** Per-token rate limit (default from DRUMS_RATE_LIMIT / DRUMS_RATE_BURST). */
  rateLimit?: RateLimitOptions;
  /** Fields features above the API add to every session view (the OSWorld endpoint). */
  viewExtras?: ViewExtras;
  /** The CPU guard, for /metrics (its demotions). */
  cpuGuard?: CpuGuardView;
  /** The fair share between sessions (default: one from DRUMS_FAIR_SLOTS / DRUMS_FAIR_QUEUE's defaults). */
  fair?: FairScheduler;
  /** The warm pools (default: a new set over `mgr`, nothing loaded). */
  pools?: PoolManager;
  /** The sessions' x11vnc servers (default: a new set over `mgr`). */
  vnc?: VncServers;
}

export { sessionView } from './routes/sessions.ts';

export function createApp(mgr: SessionManager, display: DisplayService, opts: AppOptions) {
  const app = new Hono();
  const maxBody = opts.maxBodyBytes ?? 8 * 1024 * 1024;
  // Load the spec's request-body schemas now: a JSON-body operation without an error code fails here.
  specBodies();

  app.onError((err, c) => {
    // Every layer's errors (display, a11y, image included) are DrumsErrors with a spec code.
    if (err instanceof DrumsError) return c.json(errorBody(err), statusFor(err.code) as 400);
    log('error', 'unhandled error', { path: c.req.path, error: String(err?.stack ?? err) });
    return c.json({ error: { code: 'internal', message: 'internal error; see the daemon log' } }, 500);
  });
  // The request pipeline (src/api/request.ts), outermost first: metrics, Host/Origin/token,
  // per-token rate limit, body limit, fair share, then idempotency (create) and the generation.
  const extras = takeoverExtras(display, opts.viewExtras);
  const fair = opts.fair ?? new FairScheduler(fairShareOf());
  const services = { fair, pools: opts.pools ?? new PoolManager(mgr), vnc: opts.vnc ?? new VncServers(mgr) };
  const ctx = createRouteContext(mgr, display, services, maxBody, (s) => sessionView(s, extras));
  app.use('*', observe());
  // Dashboard logins (one-time codes from `drums ui`, then a cookie) live as long as this daemon (a unit test's fake manager has no instance).
  const logins = new UiLogins(mgr.inst?.name ?? 'drums');
  app.use('*', security({ ...opts, logins }));
  app.use('*', rateLimit(opts.rateLimit ?? rateLimitOf({ rateLimit: FIELDS.rateLimit.default, rateBurst: FIELDS.rateBurst.default })));
  app.use('*', bodyLimit(maxBody));
  // The fair share is the daemon's (DRUMS_FAIR_SLOTS / DRUMS_FAIR_QUEUE), shared with the OSWorld guest routes.
  app.use('/v1/sessions/:id/*', fairShare(fair));
  app.use('/v1/sessions', idempotency(ctx));
  app.use('/v1/sessions/:id', sessionGeneration(ctx));
  app.use('/v1/sessions/:id/*', sessionGeneration(ctx));
  app.notFound(notFoundOr405(app));
  app.route('/', metaRoutes(ctx, opts.cpuGuard));
  app.route('/', eventRoutes(ctx));
  app.route('/', hostRoutes(ctx));
  app.route('/', frameRoutes(ctx));
  app.route('/', uiLoginRoutes(logins));

  app.get('/healthz', (c) => c.json({ ok: true }));
  // Route modules, one per area (each file owns its routes).
  app.route('/', observeRoutes(ctx));
  app.route('/', actionRoutes(ctx));
  app.route('/', windowRoutes(ctx));
  app.route('/', execRoutes(ctx));
  app.route('/', fileRoutes(ctx));
  app.route('/', sessionRoutes(ctx));
  app.route('/', poolRoutes(ctx));
  app.route('/', forkRoutes(ctx));
  app.route('/', episodeRoutes(ctx));

  // A known path with the wrong method is a 405 (notFoundOr405 above), not a 404.
  return app;
}
