/** Frames beyond one screenshot: take-over, the WebSocket frame stream, the dashboard, VNC. */
import { Hono } from 'hono';
import type { RouteContext } from '../request.ts';
import { streamRoutes } from './stream.ts';
import { takeoverRoutes } from './takeover.ts';
import { uiRoutes } from './ui.ts';
import { upgradeTicket } from './upgrade.ts';
import { attachViewer } from './vnc.ts';
import { DrumsError } from '../../common/errors.ts';

export function frameRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.route('/', takeoverRoutes(ctx));
  app.route('/', streamRoutes(ctx));
  app.route('/', uiRoutes(ctx));
  // On-demand VNC (src/api/frames/vnc.ts over src/session/vnc-server.ts): raw RFB over a WebSocket.
  app.get('/v1/sessions/:id/vnc', (c) => {
    const s = ctx.session(c);
    for (const k of Object.keys(c.req.query()))
      if (k !== 'generation' && k !== 'takeover')
        throw new DrumsError('invalid_request', `${k.slice(0, 40)}: unknown query parameter; allowed: generation, takeover`, {
          details: { field: k.slice(0, 40) },
        });
    // An expected generation was checked by the pipeline (request.ts).
    ctx.usable(s);
    // Input from this viewer reaches the session only while it holds the take-over (rfb-gate.ts).
    const reg = ctx.display.takeovers;
    const held = c.req.query('takeover');
    if (held !== undefined && reg.get(s)?.id !== held)
      throw new DrumsError('takeover_not_found', `takeover: '${held.slice(0, 32)}' is not the take-over held on session ${s.id}`, {
        details: { field: 'takeover' },
      });
    const ticket = upgradeTicket(c);
    if (!ticket)
      throw new DrumsError(
        'upgrade_required',
        'this is a WebSocket endpoint carrying RFB (noVNC); for a VNC viewer use `drums session vnc ID` (docs/dashboard.md)',
      );
    const generation = s.generation;
    ticket.accept((ws) => attachViewer(ctx.vnc, s, ws, () => held !== undefined && s.generation === generation && reg.get(s)?.id === held));
    return c.body(null, 204);
  });
  return app;
}
