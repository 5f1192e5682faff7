import { Hono } from 'hono';
import { DrumsError } from '../../common/errors.ts';
import type { ReleaseMode } from '../../pools/pools.ts';
import type { RouteContext } from '../request.ts';
import { metrics } from '../metrics.ts';
import { checkBody } from '../spec-validate.ts';

/** Warm pools: GET/PUT/DELETE /v1/pools[/{name}] and POST /v1/sessions/{id}/release (claims are POST /v1/sessions). */
export function poolRoutes(ctx: RouteContext) {
  const { pools, display } = ctx;
  pools.observers.claim.push((pool, result) => metrics.poolClaims.inc({ pool, result }));
  pools.observers.refill.push((pool, seconds) => metrics.poolRefill.observe({ pool }, seconds));
  const app = new Hono();
  app.get('/v1/pools', (c) => c.json({ pools: pools.list() }));
  app.get('/v1/pools/:name', (c) => c.json(pools.view(c.req.param('name'))));
  app.put('/v1/pools/:name', async (c) => {
    const body = await ctx.body(c);
    checkBody('putPool', body);
    const { view, created } = pools.put(c.req.param('name'), body);
    return c.json(view, created ? 201 : 200);
  });
  // A task pool's filler adds a session it set up (src/pools/pools.ts, addMember).
  app.post('/v1/pools/:name/members', async (c) => {
    const body = (await ctx.body(c)) as Record<string, unknown>;
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw new DrumsError('invalid_request', 'body: must be a JSON object', { details: { field: 'body' } });
    for (const k of Object.keys(body))
      if (k !== 'session' && k !== 'origin')
        throw new DrumsError('invalid_request', `${k}: unknown field; allowed: session, origin`, { details: { field: k } });
    if (typeof body.session !== 'string')
      throw new DrumsError('invalid_request', 'session: must be the id of a ready session the filler set up', { details: { field: 'session' } });
    checkBody('addPoolMember', body);
    return c.json(pools.addMember(c.req.param('name'), body.session, body.origin));
  });
  app.delete('/v1/pools/:name', (c) => {
    pools.remove(c.req.param('name'));
    return c.body(null, 204);
  });
  app.post('/v1/sessions/:id/release', async (c) => {
    const s = ctx.session(c);
    const body = (await ctx.body(c)) as Record<string, unknown>;
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw new DrumsError('invalid_request', 'body: must be a JSON object', { details: { field: 'body' } });
    for (const k of Object.keys(body))
      if (k !== 'mode') throw new DrumsError('invalid_request', `${k}: unknown field; allowed: mode`, { details: { field: k } });
    const mode = (body.mode ?? 'reset') as ReleaseMode;
    if (mode !== 'reset' && mode !== 'destroy')
      throw new DrumsError('invalid_request', 'mode: must be "reset" (back to its pool, as a fresh desktop) or "destroy"', { details: { field: 'mode' } });
    checkBody('releaseSession', body);
    if (s.state === 'resetting' || s.state === 'creating' || s.state === 'destroying')
      throw new DrumsError('session_busy', `session '${s.id}' is ${s.state}; wait for it to finish`);
    display.drop(s.id);
    const { returned } = await pools.release(s, mode);
    return c.json({ id: s.id, pool: s.spec.labels['drums.pool'] ?? null, mode, returned });
  });
  return app;
}
