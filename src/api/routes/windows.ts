import { Hono } from 'hono';
import { DrumsError } from '../../common/errors.ts';
import { displayCall, type RouteContext } from '../request.ts';
import { TAKEOVER_HEADER } from '../frames/takeover.ts';
import { bad } from './params.ts';

/** Windows: the list (with the active one, the cursor and the screen), and activate or close one. */

function parseWid(v: string | undefined): number {
  const s = v ?? '';
  const n = /^0x[0-9a-f]{1,8}$/i.test(s) ? parseInt(s, 16) : /^\d{1,10}$/.test(s) ? Number(s) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 0xffffffff) throw bad('wid', 'must be a window id (decimal or 0x hex)');
  return n;
}

export function windowRoutes(ctx: RouteContext) {
  const { display } = ctx;
  const app = new Hono();
  app.get('/v1/sessions/:id/windows', async (c) => {
    const s = ctx.ready(c);
    const d = await display.connection(s);
    const [list, active, cursor] = await displayCall(() => Promise.all([d.listWindows(), d.activeWindow(), d.cursorPosition()]));
    return c.json({
      generation: s.generation,
      windows: list.map((w) => ({
        id: w.id,
        title: w.title,
        className: w.className,
        instance: w.instance,
        pid: w.pid,
        x: w.x,
        y: w.y,
        width: w.width,
        height: w.height,
      })),
      active: active?.id ?? null,
      cursor,
      screen: d.screenSize(),
    });
  });

  for (const op of ['activate', 'close'] as const) {
    app.post(`/v1/sessions/:id/windows/:wid/${op}`, async (c) => {
      const wid = parseWid(c.req.param('wid'));
      const s = ctx.ready(c);
      ctx.display.takeovers.checkInput(s, c.req.header(TAKEOVER_HEADER));
      const d = await display.connection(s);
      const list = await displayCall(() => d.listWindows());
      if (!list.some((w) => w.id === wid))
        throw new DrumsError('window_not_found', `no managed window ${wid} in session ${s.id}; list them with GET /v1/sessions/${s.id}/windows`, {
          details: { wid },
        });
      await displayCall(() => (op === 'activate' ? d.activateWindow(wid) : d.closeWindow(wid)));
      return c.json({ ok: true, id: wid, generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
    });
  }
  return app;
}
