import type { MiddlewareHandler } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import { DrumsError } from '../../common/errors.ts';

/** 413 payload_too_large for bodies over `maxBytes`, by Content-Length or while streaming a chunked body. */
export function bodyLimit(maxBytes: number): MiddlewareHandler {
  const limit = honoBodyLimit({
    maxSize: maxBytes,
    onError: () => { throw new DrumsError('payload_too_large', `request body is over ${maxBytes} bytes`, { details: { limit: maxBytes } }); },
  });
  return async (c, next) => {
    const len = c.req.header('content-length');
    if (len !== undefined && Number(len) > maxBytes) {
      // Note: read and discard the refused body rather than leave it unread: a client still
      // writing it would otherwise hit EPIPE on a closed socket and never see the 413.
      (c.env as { incoming?: { resume(): void } } | undefined)?.incoming?.resume();
      throw new DrumsError('payload_too_large', `request body is over ${maxBytes} bytes`, { details: { limit: maxBytes } });
    }
    return limit(c, next);
  };
}

export interface RateLimitOptions {
  /** Sustained requests per second per token (0 = no limit). */
  perSecond: number;
  /** Bucket size: how many requests may come at once. */
  burst: number;
}

export function rateLimitFromEnv(env = process.env): RateLimitOptions {
  const perSecond = Number(env.DRUMS_RATE_LIMIT ?? 5000);
  const burst = Number(env.DRUMS_RATE_BURST ?? Math.max(1, perSecond * 2));
  return { perSecond: Number.isFinite(perSecond) && perSecond >= 0 ? perSecond : 5000, burst: Number.isFinite(burst) && burst >= 1 ? burst : 10000 };
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
      throw new DrumsError('rate_limited', `more than ${opts.perSecond} requests/s (burst ${opts.burst}) for this token; retry after ${Math.max(1, wait)} s`, { details: { perSecond: opts.perSecond, burst: opts.burst } });
    }
    b.tokens -= 1;
    return next();
  };
}
