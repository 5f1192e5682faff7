import type { MiddlewareHandler } from 'hono';
import { timingSafeEqual } from 'node:crypto';
import { DrumsError } from '../../common/errors.ts';

/** Routes anyone on loopback may read without the token (nothing secret in them). */
const PUBLIC = new Set(['/healthz', '/openapi.json', '/docs']);

/**
 * Host and Origin checks, then the bearer token, before anything else.
 * - Host must be a loopback name or the listen address (DNS rebinding defence).
 * - Any Origin header is refused: browsers send one on every cross-origin
 *   fetch, and no legitimate client of the daemon is a web page.
 */
export function security(opts: { token: string; allowedHosts: string[] }): MiddlewareHandler {
  const tokenBuf = Buffer.from(opts.token);
  return async (c, next) => {
    const host = (c.req.header('host') ?? '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    if (!opts.allowedHosts.includes(host)) throw new DrumsError('forbidden_host', `Host '${host.slice(0, 100)}' is not allowed; use one of ${opts.allowedHosts.join(', ')}`);
    if (c.req.header('origin') !== undefined) throw new DrumsError('forbidden_origin', 'cross-origin requests are refused (an Origin header was sent)');
    if (PUBLIC.has(c.req.path) && c.req.method === 'GET') return next();
    const auth = c.req.header('authorization') ?? '';
    const given = Buffer.from(auth.startsWith('Bearer ') ? auth.slice(7) : '');
    if (given.length !== tokenBuf.length || !timingSafeEqual(given, tokenBuf)) {
      throw new DrumsError('unauthorized', 'missing or wrong bearer token (Authorization: Bearer <token>; see DRUMS_TOKEN or <state dir>/token)');
    }
    return next();
  };
}
