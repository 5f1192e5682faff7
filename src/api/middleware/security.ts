import type { MiddlewareHandler } from 'hono';
import { timingSafeEqual } from 'node:crypto';
import { DrumsError } from '../../common/errors.ts';

/** Routes anyone on loopback may read without the token (nothing secret in them). */
const PUBLIC = new Set(['/healthz', '/openapi.json', '/docs']);
/** Routes the dashboard calls with an Origin header (its same-origin GETs carry none). */
const DASHBOARD_ORIGIN_ROUTES = /^\/v1\/sessions\/s[0-9a-f]{10}\/(stream|takeover)$/;

/**
 * Host and Origin checks, then the bearer token, before anything else.
 * - Host must be a loopback name or the listen address (DNS rebinding defence).
 * - Any Origin header is refused: browsers send one on every cross-origin
 *   fetch, and no web page may drive the daemon, with one exception: the
 *   daemon's own origin (its dashboard, /ui) on the stream and take-over
 *   routes (the Host check above pins that origin to the daemon).
 */
export function security(opts: { token: string; allowedHosts: string[] }): MiddlewareHandler {
  const tokenBuf = Buffer.from(opts.token);
  return async (c, next) => {
    const host = (c.req.header('host') ?? '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    if (!opts.allowedHosts.includes(host))
      throw new DrumsError('forbidden_host', `Host '${host.slice(0, 100)}' is not allowed; use one of ${opts.allowedHosts.join(', ')}`);
    // The one page allowed to call the daemon is its own dashboard (/ui): its own origin, and
    // only on the routes a browser sends an Origin to (WebSocket, POST/DELETE take-over).
    const origin = c.req.header('origin');
    if (origin !== undefined && !(origin === `http://${c.req.header('host')}` && DASHBOARD_ORIGIN_ROUTES.test(c.req.path))) {
      throw new DrumsError(
        'forbidden_origin',
        "requests from web pages are refused (an Origin header was sent); only the daemon's own dashboard may open streams and take sessions over",
      );
    }
    if (PUBLIC.has(c.req.path) && c.req.method === 'GET') return next();
    const auth = c.req.header('authorization') ?? '';
    // Opening the dashboard in a browser: GET /ui?token=... (the page then drops it from the URL).
    const uiToken = c.req.method === 'GET' && c.req.path === '/ui' ? c.req.query('token') : undefined;
    const given = Buffer.from(auth.startsWith('Bearer ') ? auth.slice(7) : (uiToken ?? ''));
    if (given.length !== tokenBuf.length || !timingSafeEqual(given, tokenBuf)) {
      throw new DrumsError('unauthorized', 'missing or wrong bearer token (Authorization: Bearer <token>; see DRUMS_TOKEN or <state dir>/token)');
    }
    return next();
  };
}
