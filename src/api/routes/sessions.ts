import { Hono } from 'hono';
import { DrumsError } from '../../common/errors.ts';
import { parseSpec } from '../../session/spec.ts';
import { episodeStoreFull } from '../../session/episodes.ts';
import type { Session } from '../../session/manager.ts';
import type { RouteContext } from '../request.ts';
import { checkBody } from '../spec-validate.ts';
import type { Session as SessionView } from '../../protocol/generated/types.ts';
import { memoryUsage, oomKills } from '../../host/cgroup-fs.ts';
import { parseClaim } from '../../pools/pools.ts';
import { standbyView } from '../../session/standby.ts';

/** Fields a feature adds to a session's view (the daemon wires OSWorld's endpoint in; the app, the take-over). */
export type ViewExtras = (s: Session) => Partial<Pick<SessionView, 'osworld' | 'takeover'>>;

/** The public view of a session (no host paths), in the spec's shape. */
export function sessionView(s: Session, extras?: ViewExtras): SessionView {
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
    userns: s.uids ? { hostUidBase: s.uids.base, size: s.uids.size } : null,
    limits: {
      memoryMb: s.spec.memoryBytes / 1024 ** 2,
      diskMb: s.spec.diskBytes / 1024 ** 2,
      diskReadMbps: s.spec.diskReadMbps ?? 0,
      diskWriteMbps: s.spec.diskWriteMbps ?? 0,
      cpus: s.spec.cpus,
      pids: s.spec.pids,
    },
    // What the session's memory cgroup says now: a process killed at the limit shows here, the session lives on.
    memory: { usageBytes: memoryUsage(s.names.cgroup), oomKills: oomKills(s.names.cgroup) },
    labels: s.spec.labels,
    timings: Object.fromEntries(Object.entries(s.timings).map(([k, v]) => [k, Math.round(v)])),
    takeover: null,
    ...(s.brokenReason ? { brokenReason: s.brokenReason } : {}),
    ...(s.spec.record ? { recording: { ...s.spec.record, generation: s.generation, stopped: s._episode?.stopped ?? null } } : {}),
    ...(s.spec.standbys ? { standbys: standbyView(s) } : {}),
    ...extras?.(s),
  } satisfies SessionView;
}

/** Session lifecycle (observe, actions, windows, exec and files have a route module each). */
export function sessionRoutes(ctx: RouteContext) {
  const { mgr, display, pools } = ctx;
  const app = new Hono();
  app.get('/v1/sessions', (c) =>
    c.json({
      sessions: mgr
        .list()
        .filter((s) => !pools.isHidden(s))
        .map(ctx.view),
    }),
  );
  app.post('/v1/sessions', async (c) => {
    const body = await ctx.body(c);
    // A claim from a warm pool: `{pool, onEmpty?, labels?, ttlSeconds?}` (src/pools/pools.ts).
    if (body && typeof body === 'object' && !Array.isArray(body) && 'pool' in body) {
      const claim = parseClaim(body as Record<string, unknown>);
      checkBody('createSession', body);
      const { session, hit } = await pools.claim(claim);
      c.header('x-drums-pool', `${claim.pool}; ${hit ? 'hit' : 'miss'}`);
      return c.json(ctx.view(session), 201);
    }
    // The hand-written validator (today's codes and messages), then the spec's schema
    // (a JSON null is no body: the default session). create() parses the spec again.
    const spec = parseSpec(body, mgr.defaultCpus);
    checkBody('createSession', body ?? {});
    // Asked to record, with the episode store full: a clear refusal now rather than a recording stopped at once.
    if (spec.record && mgr.episodes.hostFull()) throw episodeStoreFull(mgr.episodes);
    // A spec equal to a pool's template (TTL aside) is served from that pool.
    const pool = pools.match(spec);
    if (pool) {
      const { session, hit } = await pools.claim({ pool, onEmpty: 'create', labels: {}, ttlSeconds: spec.ttlSeconds });
      c.header('x-drums-pool', `${pool}; ${hit ? 'hit' : 'miss'}`);
      return c.json(ctx.view(session), 201);
    }
    // A client that goes away stops the create between steps, and what was made is undone.
    return c.json(ctx.view(await mgr.create(body, { signal: c.req.raw.signal })), 201);
  });
  app.get('/v1/sessions/:id', (c) => c.json(ctx.view(ctx.session(c))));
  app.delete('/v1/sessions/:id', async (c) => {
    const s = ctx.session(c);
    display.drop(s.id);
    await mgr.destroy(s.id);
    return c.body(null, 204);
  });
  app.post('/v1/sessions/:id/reset', async (c) => {
    const s = ctx.session(c);
    // The body: at most an expected generation (one in the query or header was checked by
    // request.ts), then the spec's schema of it.
    const body = await ctx.body(c);
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw new DrumsError('invalid_request', 'body: must be a JSON object', { details: { field: 'body' } });
    for (const k of Object.keys(body))
      if (k !== 'generation') throw new DrumsError('invalid_request', `${k}: unknown field; allowed: generation`, { details: { field: k } });
    const fromBody = (body as { generation?: unknown }).generation;
    if (fromBody !== undefined && fromBody !== null) ctx.checkGeneration(c, s, fromBody);
    checkBody('resetSession', body);
    display.drop(s.id);
    return c.json(ctx.view(await mgr.reset(s.id, { signal: c.req.raw.signal })));
  });
  return app;
}
