import { Hono } from 'hono';
import { timingSafeEqual } from 'node:crypto';
import { DrumsError } from '../common/errors.ts';
import { log } from '../common/log.ts';
import type { SessionManager } from '../session/manager.ts';
import { createRouteContext } from './context.ts';
import { sessionRoutes } from './routes/sessions.ts';
import { STATUS_BY_CODE, errorBody, statusFor } from './errors.ts';
import type { DisplayService } from './display-service.ts';

export interface AppOptions {
  token: string;
  /** Host names accepted in the Host header (DNS-rebinding defence). */
  allowedHosts: string[];
  maxBodyBytes?: number;
}

export { sessionView } from './routes/sessions.ts';

export function createApp(mgr: SessionManager, display: DisplayService, opts: AppOptions) {
  const app = new Hono();
  const maxBody = opts.maxBodyBytes ?? 8 * 1024 * 1024;
  const tokenBuf = Buffer.from(opts.token);

  app.onError((err, c) => {
    if (err instanceof DrumsError) return c.json(errorBody(err), statusFor(err.code) as 400);
    // Errors from other layers (image, display) carry a code from the same table.
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code in STATUS_BY_CODE) {
      const details = (err as { details?: unknown }).details;
      return c.json({ error: { code, message: err.message, ...(details ? { details } : {}) } }, statusFor(code) as 400);
    }
    log('error', 'unhandled error', { path: c.req.path, error: String(err?.stack ?? err) });
    return c.json({ error: { code: 'internal', message: 'internal error; see the daemon log' } }, 500);
  });
  app.notFound((c) => c.json({ error: { code: 'not_found', message: `no route ${c.req.method} ${c.req.path}` } }, 404));

  // Host/Origin checks, then the bearer token, before anything else.
  app.use('*', async (c, next) => {
    const host = (c.req.header('host') ?? '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    if (!opts.allowedHosts.includes(host)) throw new DrumsError('forbidden_host', `Host '${host}' is not allowed; use one of ${opts.allowedHosts.join(', ')}`);
    const origin = c.req.header('origin');
    if (origin !== undefined) throw new DrumsError('forbidden_origin', 'cross-origin requests are refused (an Origin header was sent)');
    if (c.req.path === '/healthz') return next();
    const auth = c.req.header('authorization') ?? '';
    const given = Buffer.from(auth.startsWith('Bearer ') ? auth.slice(7) : '');
    if (given.length !== tokenBuf.length || !timingSafeEqual(given, tokenBuf)) {
      throw new DrumsError('unauthorized', 'missing or wrong bearer token (Authorization: Bearer <token>; see DRUMS_TOKEN or <state dir>/token)');
    }
    const len = Number(c.req.header('content-length') ?? 0);
    if (len > maxBody) throw new DrumsError('payload_too_large', `request body is over ${maxBody} bytes`);
    return next();
  });

  const ctx = createRouteContext(mgr, display, maxBody);
  app.get('/healthz', (c) => c.json({ ok: true }));
  // Route modules, one per area (each file owns its routes).
  app.route('/', sessionRoutes(ctx));

  // A known path with the wrong method is a 405, not a 404.
  app.all('/v1/sessions', (c) => c.json({ error: { code: 'method_not_allowed', message: `${c.req.method} not allowed on /v1/sessions` } }, 405));
  app.all('/v1/sessions/:id', (c) => c.json({ error: { code: 'method_not_allowed', message: `${c.req.method} not allowed here` } }, 405));
  return app;
}
