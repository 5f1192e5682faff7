/**
 * `Idempotency-Key` on POST /v1/sessions (mounted in app.ts in front of the create route).
 */
import type { Context, MiddlewareHandler } from 'hono';
import { createHash } from 'node:crypto';
import { DrumsError } from '../common/errors.ts';
import type { SessionManager } from '../session/manager.ts';
import type { RouteContext } from './request.ts';

interface IdemEntry {
  hash: string;
  at: number;
  /** Resolves to the created session's id (or undefined when the first request failed). */
  result: Promise<string | undefined>;
}

const KEY_RE = /^[\x21-\x7e]{1,255}$/;
const KEY_TTL_MS = 24 * 3600_000;

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/**
 * `Idempotency-Key` on POST /v1/sessions: the first request with a key runs;
 * a retry with the same key and an equal body (key order and whitespace do
 * not matter) waits for it and returns the same session with status 200 and
 * `idempotency-replayed: true`; a different body is 409 idempotency_conflict.
 * A first request that failed does not hold the key: a retry runs again.
 */
export function idempotency(ctx: RouteContext): MiddlewareHandler {
  const entries = new Map<string, IdemEntry>();
  const mgr: SessionManager = ctx.mgr;
  return async (c: Context, next) => {
    if (c.req.method !== 'POST' || c.req.path !== '/v1/sessions') return next();
    const key = c.req.header('idempotency-key');
    if (key === undefined) {
      await next();
      if (c.res.status === 201) {
        try {
          c.res.headers.set('x-drums-generation', String(((await c.res.clone().json()) as { generation: number }).generation));
        } catch {}
      }
      return;
    }
    if (!KEY_RE.test(key))
      throw new DrumsError('invalid_request', 'Idempotency-Key: must be 1-255 printable ASCII characters', { details: { field: 'Idempotency-Key' } });
    const body = await ctx.body(c);
    const hash = createHash('sha256').update(canonical(body)).digest('hex');
    const now = Date.now();
    for (const [k, e] of entries) if (now - e.at > KEY_TTL_MS) entries.delete(k);
    const prev = entries.get(key);
    if (prev) {
      if (prev.hash !== hash)
        throw new DrumsError('idempotency_conflict', 'this Idempotency-Key was used with a different request body', { details: { field: 'Idempotency-Key' } });
      const id = await prev.result;
      if (id !== undefined) {
        const s = mgr.list().find((x) => x.id === id);
        if (!s) mgr.get(id); // 410 session_expired or 404 session_not_found
        c.header('idempotency-replayed', 'true');
        c.header('x-drums-generation', String(s!.generation));
        return c.json(ctx.view(s!), 200);
      }
      if (entries.get(key) === prev) entries.delete(key);
    }
    let done!: (id: string | undefined) => void;
    const entry: IdemEntry = {
      hash,
      at: now,
      result: new Promise((r) => {
        done = r;
      }),
    };
    entries.set(key, entry);
    try {
      await next();
      if (c.res.status === 201) {
        const view = (await c.res.clone().json()) as { id: string; generation: number };
        try {
          c.res.headers.set('x-drums-generation', String(view.generation));
        } catch {}
        done(view.id);
        return;
      }
    } catch (e) {
      done(undefined);
      if (entries.get(key) === entry) entries.delete(key);
      throw e;
    }
    done(undefined);
    if (entries.get(key) === entry) entries.delete(key);
  };
}
