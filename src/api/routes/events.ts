import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import { DrumsError } from '../../common/errors.ts';
import type { RouteContext } from '../request.ts';

const POLL_MS = 50;
const KEEPALIVE_MS = 15_000;

/**
 * GET /v1/sessions/:id/events: server-sent events. `state` on connect and on
 * every change of state or generation; `frame` (JPEG, base64) at most `fps`
 * times per second while the session is ready; `end` when it is destroyed.
 */
export function eventRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.get('/v1/sessions/:id/events', async (c) => {
    const s = ctx.session(c);
    const fpsRaw = c.req.query('fps') ?? '0';
    const fps = Number(fpsRaw);
    if (!/^\d+(\.\d+)?$/.test(fpsRaw) || !(fps >= 0 && fps <= 10))
      throw new DrumsError('invalid_request', `fps: must be a number within 0..10, got '${fpsRaw.slice(0, 40)}'`, { details: { field: 'fps' } });
    for (const k of Object.keys(c.req.query()))
      if (k !== 'fps' && k !== 'generation')
        throw new DrumsError('invalid_request', `${k.slice(0, 40)}: unknown query parameter; allowed: fps, generation`, { details: { field: k.slice(0, 40) } });
    c.header('x-drums-generation', String(s.generation));
    c.header('cache-control', 'no-store');
    return streamSSE(c, async (stream) => {
      let closed = false;
      stream.onAbort(() => {
        closed = true;
      });
      let last = '';
      let lastFrame = 0;
      let lastSent = Date.now();
      let id = 0;
      while (!closed) {
        const live = ctx.mgr.list().includes(s);
        if (!live) {
          const t = [...ctx.mgr.terminations].reverse().find((x) => x.id === s.id);
          await stream.writeSSE({
            event: 'end',
            id: String(++id),
            data: JSON.stringify({ reason: t?.reason ?? 'destroyed', terminatedAt: t?.terminatedAt ?? new Date().toISOString() }),
          });
          break;
        }
        const sig = `${s.state}/${s.generation}`;
        if (sig !== last) {
          last = sig;
          await stream.writeSSE({ event: 'state', id: String(++id), data: JSON.stringify(ctx.view(s)) });
          lastSent = Date.now();
        }
        if (fps > 0 && s.state === 'ready' && Date.now() - lastFrame >= 1000 / fps) {
          lastFrame = Date.now();
          try {
            const shot = await ctx.display.screenshot(s, { format: 'jpeg', quality: 60 });
            await stream.writeSSE({
              event: 'frame',
              id: String(++id),
              data: JSON.stringify({ generation: s.generation, width: shot.width, height: shot.height, format: 'jpeg', data: shot.data.toString('base64') }),
            });
            lastSent = Date.now();
          } catch {
            /* the session may be mid-reset; the next state event says so */
          }
        }
        if (Date.now() - lastSent > KEEPALIVE_MS) {
          await stream.write(': keepalive\n\n');
          lastSent = Date.now();
        }
        await stream.sleep(POLL_MS);
      }
    });
  });
  return app;
}
