import type { Readable } from 'node:stream';
import type { MiddlewareHandler } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import type { DaemonConfig } from '../../common/config.ts';
import { DrumsError } from '../../common/errors.ts';

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
      if (incoming) await discard(incoming, Number(len) <= DRAIN_MAX_BYTES ? DRAIN_TIMEOUT_MS : 0);
      throw new DrumsError('payload_too_large', `request body is over ${maxBytes} bytes`, { details: { limit: maxBytes } });
    }
    return limit(c, next);
  };
}

const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
const DRAIN_TIMEOUT_MS = 15_000;

/** Reads and drops a request body; resolves when it ended, failed, or after `waitMs`. */
function discard(body: Readable, waitMs: number): Promise<void> {
  body.resume();
  if (body.readableEnded || body.destroyed || waitMs <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      body.off('end', done);
      body.off('error', done);
      body.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, waitMs);
    body.on('end', done);
    body.on('error', done);
    body.on('close', done);
  });
}

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
