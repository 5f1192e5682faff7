/**
 * Take-over: a person (usually from the dashboard) holds a session's input for a while. During
 * it, agent input (POST /actions, window activate/close, stream input) gets 409
 * `session_taken_over` unless it carries the take-over's id (`x-drums-takeover` header, or the
 * stream opened with `?takeover=<id>`). A second take-over while one is held: 409
 * `takeover_held`. A take-over belongs to one generation: a reset or destroy ends it.
 */
import { Hono } from 'hono';
import { DrumsError, errorMessage } from '../../common/errors.ts';
import { log } from '../../common/log.ts';
import type { DisplayService, Takeover } from '../../session/display-service.ts';
import type { RouteContext } from '../request.ts';
import type { ViewExtras } from '../routes/sessions.ts';
import { checkBody } from '../spec-validate.ts';

export const TAKEOVER_HEADER = 'x-drums-takeover';
const HOLDER_RE = /^[\w .@:-]{1,64}$/;

/** The public view: who holds it, since when (never the id, which is the holder's capability). */
export function takeoverView(t: Takeover | undefined): { holder: string; since: string } | null {
  return t ? { holder: t.holder, since: t.since } : null;
}

/** `extras` plus the session's take-over, for every session view (GET /v1/sessions[/:id]). */
export function takeoverExtras(display: DisplayService, extras?: ViewExtras): ViewExtras {
  const reg = display.takeovers;
  return (s) => ({ ...extras?.(s), takeover: takeoverView(reg.get(s)) });
}

export function takeoverRoutes(ctx: RouteContext) {
  const app = new Hono();
  const reg = ctx.display.takeovers;
  app.get('/v1/sessions/:id/takeover', (c) => {
    const s = ctx.session(c);
    return c.json({ generation: s.generation, takeover: takeoverView(reg.get(s)) });
  });
  app.post('/v1/sessions/:id/takeover', async (c) => {
    const s = ctx.session(c);
    const body = (await ctx.body(c)) as Record<string, unknown>;
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw new DrumsError('invalid_request', 'body: must be an object {holder?}', { details: { field: 'body' } });
    for (const k of Object.keys(body))
      if (k !== 'holder') throw new DrumsError('invalid_request', `${k.slice(0, 40)}: unknown field; allowed: holder`, { details: { field: k.slice(0, 40) } });
    const holder = body.holder ?? 'dashboard';
    if (typeof holder !== 'string' || !HOLDER_RE.test(holder))
      throw new DrumsError('invalid_request', 'holder: must be 1..64 characters of letters, digits, space and ._@:-', { details: { field: 'holder' } });
    checkBody('takeOver', body);
    ctx.usable(s);
    const t = reg.take(s, holder);
    return c.json({ id: t.id, holder: t.holder, since: t.since, generation: t.generation }, 201);
  });
  app.delete('/v1/sessions/:id/takeover', async (c) => {
    const s = ctx.session(c);
    const t = reg.release(s, c.req.header(TAKEOVER_HEADER) ?? c.req.query('takeover'));
    // The holder's input is gated off from here on; what it still holds down (a VNC or dashboard
    // drag let go mid-way, a key_down) is released before agent input resumes, so the agent
    // does not start with a button pressed. Best effort: a session whose X server is gone has
    // nothing held.
    if (s.state === 'ready' && s.generation === t.generation) {
      try {
        const held = await (await ctx.display.connection(s)).releaseAll();
        if (held.buttons.length || held.keycodes.length) log('info', 'take-over released with input held: released it', { session: s.id, ...held });
      } catch (e) {
        log('warn', 'take-over release: could not release held input', { session: s.id, error: errorMessage(e) });
      }
    }
    return c.body(null, 204);
  });
  return app;
}
