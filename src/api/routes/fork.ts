import { Hono } from 'hono';
import { forkSession, parseFork } from '../../pools/fork.ts';
import type { RouteContext } from '../request.ts';
import { refuseIfDraining } from './host.ts';
import { checkBody } from '../spec-validate.ts';

/** POST /v1/sessions/{id}/fork: N copies of a live session (src/pools/fork.ts). */
export function forkRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.post('/v1/sessions/:id/fork', async (c) => {
    refuseIfDraining(ctx.mgr);
    const s = ctx.session(c);
    const body = await ctx.body(c);
    const req = parseFork(body);
    checkBody('forkSession', body);
    const t0 = performance.now();
    // The daemon's X connection shares a memory segment with the session's X server (MIT-SHM) and
    // its AT-SPI connection is a socket to the host: CRIU can't dump either. Drop them (they reopen
    // on the next use); checkpointSource waits until the X server has let go of the segment.
    if (req.mode === 'memory') ctx.display.drop(s.id);
    const r = await forkSession(ctx.mgr, s, req);
    return c.json(
      {
        source: s.id,
        mode: r.mode,
        copies: r.copies.map((x) => ctx.view(x)),
        timings: { snapshotMs: Math.round(r.snapshotMs), pausedMs: Math.round(r.pausedMs), totalMs: Math.round(performance.now() - t0) },
      },
      201,
    );
  });
  return app;
}
