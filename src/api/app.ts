import { Hono, type Context } from 'hono';
import { timingSafeEqual } from 'node:crypto';
import { DrumsError } from '../common/errors.ts';
import { log } from '../common/log.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import { execInSession, parseExec } from '../session/exec.ts';
import { STATUS_BY_CODE, errorBody, statusFor } from './errors.ts';
import type { DisplayService } from './display-service.ts';

export interface AppOptions {
  token: string;
  /** Host names accepted in the Host header (DNS-rebinding defence). */
  allowedHosts: string[];
  maxBodyBytes?: number;
}

/** The public view of a session (no host paths beyond what clients need). */
export function sessionView(s: Session) {
  return {
    id: s.id,
    state: s.state,
    image: s.spec.image,
    url: s.spec.url ?? null,
    screen: s.spec.screen,
    generation: s.generation,
    attempt: s.attempt,
    createdAt: s.createdAt,
    network: { address: s.subnet.address, gateway: s.subnet.gateway, egress: s.spec.egress, hostPorts: s.spec.hostPorts },
    limits: { memoryMb: s.spec.memoryBytes / 1024 ** 2, cpus: s.spec.cpus, pids: s.spec.pids },
    labels: s.spec.labels,
    timings: Object.fromEntries(Object.entries(s.timings).map(([k, v]) => [k, Math.round(v)])),
    ...(s.brokenReason ? { brokenReason: s.brokenReason } : {}),
  };
}

const ID_RE = /^s[0-9a-f]{10}$/;

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

  const body = async (c: Context): Promise<unknown> => {
    const text = await c.req.text();
    if (text.length > maxBody) throw new DrumsError('payload_too_large', `request body is over ${maxBody} bytes`);
    if (!text.trim()) return {};
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new DrumsError('invalid_json', `request body is not valid JSON: ${(e as Error).message}`);
    }
  };
  const session = (c: Context): Session => {
    const id = c.req.param('id') ?? '';
    if (!ID_RE.test(id)) throw new DrumsError('session_not_found', `no session '${id.slice(0, 64)}' (ids look like s0123456789)`);
    return mgr.get(id);
  };
  const usable = (s: Session) => {
    if (s.state === 'resetting') throw new DrumsError('session_resetting', `session ${s.id} is resetting; retry with the new generation`);
    if (s.state !== 'ready') throw new DrumsError('session_broken', `session ${s.id} is ${s.state}${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
  };

  app.get('/healthz', (c) => c.json({ ok: true }));
  app.get('/v1/sessions', (c) => c.json({ sessions: mgr.list().map(sessionView) }));
  app.post('/v1/sessions', async (c) => c.json(sessionView(await mgr.create(await body(c))), 201));
  app.get('/v1/sessions/:id', (c) => c.json(sessionView(session(c))));
  app.delete('/v1/sessions/:id', async (c) => {
    const s = session(c);
    display.drop(s.id);
    await mgr.destroy(s.id);
    return c.body(null, 204);
  });
  app.post('/v1/sessions/:id/reset', async (c) => {
    const s = session(c);
    display.drop(s.id);
    return c.json(sessionView(await mgr.reset(s.id)));
  });
  app.post('/v1/sessions/:id/exec', async (c) => {
    const s = session(c);
    const req = parseExec(await body(c));
    usable(s);
    const r = await execInSession(mgr.runtime, s.names.container, mgr.sessionEnv(), req);
    return c.json({ ...r, durationMs: Math.round(r.durationMs * 10) / 10 });
  });
  app.get('/v1/sessions/:id/screenshot', async (c) => {
    const s = session(c);
    usable(s);
    const format = c.req.query('format') ?? 'png';
    if (!['png', 'jpeg', 'webp', 'raw'].includes(format)) throw new DrumsError('invalid_format', `format must be png, jpeg, webp or raw, got '${format}'`, { details: { field: 'format' } });
    const shot = await display.screenshot(s, { format: format as 'png' });
    c.header('x-drums-generation', String(s.generation));
    c.header('x-drums-width', String(shot.width));
    c.header('x-drums-height', String(shot.height));
    return c.body(new Uint8Array(shot.data), 200, { 'content-type': shot.mimeType });
  });
  // A known path with the wrong method is a 405, not a 404.
  app.all('/v1/sessions', (c) => c.json({ error: { code: 'method_not_allowed', message: `${c.req.method} not allowed on /v1/sessions` } }, 405));
  app.all('/v1/sessions/:id', (c) => c.json({ error: { code: 'method_not_allowed', message: `${c.req.method} not allowed here` } }, 405));
  return app;
}
