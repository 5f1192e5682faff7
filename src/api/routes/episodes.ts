import { Hono, type Context } from 'hono';
import { ValidationError } from '../../common/errors.ts';
import { stepsOf } from '../../session/episodes.ts';
import type { RouteContext } from '../request.ts';
import { checkBody } from '../spec-validate.ts';

/**
 * Recorded episodes (docs/episodes.md): a session's list, one episode's events and steps, its frame and tree
 * files, and its outcome. They outlive the session: a destroyed session's episodes are still served (the store is
 * the daemon's own directory, read by session id and generation, both checked before any path is made).
 */

const MAX_PAGE = 10_000;
const MAX_DETAILS = 16 * 1024;
const OUTCOME_RE = /^[a-z][a-z0-9_]{0,31}$/;

function generationOf(c: Context): number {
  const v = c.req.param('generation') ?? '';
  if (!/^\d{1,15}$/.test(v) || Number(v) < 1) throw new ValidationError('generation', `must be a positive integer, got '${v.slice(0, 32)}'`);
  return Number(v);
}

function intQuery(c: Context, name: string, min: number, max: number): number | undefined {
  const v = c.req.query(name);
  if (v === undefined) return undefined;
  if (!/^\d{1,9}$/.test(v) || Number(v) < min || Number(v) > max) throw new ValidationError(name, `must be an integer within ${min}..${max}`);
  return Number(v);
}

function flagQuery(c: Context, name: string): boolean {
  const v = c.req.query(name);
  if (v === undefined) return false;
  if (['1', 'true', 'yes'].includes(v)) return true;
  if (['0', 'false', 'no'].includes(v)) return false;
  throw new ValidationError(name, 'must be true or false');
}

/** The outcome body, checked by hand (the codes and messages), then by the spec's schema. */
function parseOutcome(body: unknown): { reward?: number; outcome?: string; details?: Record<string, unknown> } {
  const bad = (field: string, msg: string) => new ValidationError(field, msg, 'invalid_outcome');
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw bad('body', 'must be a JSON object {reward?, outcome?, details?}');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (!['reward', 'outcome', 'details'].includes(k)) throw bad(k, 'unknown field; allowed: reward, outcome, details');
  if (b.reward !== undefined && (typeof b.reward !== 'number' || !Number.isFinite(b.reward))) throw bad('reward', 'must be a finite number');
  if (b.outcome !== undefined && (typeof b.outcome !== 'string' || !OUTCOME_RE.test(b.outcome)))
    throw bad('outcome', 'must be a lower_snake word of at most 32 characters, e.g. success, failure');
  if (b.reward === undefined && b.outcome === undefined) throw bad('body', 'give at least one of reward and outcome');
  if (b.details !== undefined) {
    if (!b.details || typeof b.details !== 'object' || Array.isArray(b.details)) throw bad('details', 'must be a JSON object');
    if (JSON.stringify(b.details).length > MAX_DETAILS) throw bad('details', `must be at most ${MAX_DETAILS} bytes as JSON`);
  }
  checkBody('setEpisodeOutcome', b);
  return {
    ...(b.reward !== undefined ? { reward: b.reward as number } : {}),
    ...(b.outcome !== undefined ? { outcome: b.outcome as string } : {}),
    ...(b.details !== undefined ? { details: b.details as Record<string, unknown> } : {}),
  };
}

const FILE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  xml: 'text/xml; charset=utf-8',
  json: 'application/json',
};

export function episodeRoutes(ctx: RouteContext) {
  const { mgr } = ctx;
  const store = mgr.episodes;
  const app = new Hono();
  /** The session id, checked: episodes of a session that is gone are still served; an unknown id is 404. */
  const idOf = (c: Context): string => {
    const id = c.req.param('id') ?? '';
    if (store.list(id).length) return id;
    return ctx.session(c).id;
  };

  app.get('/v1/sessions/:id/episodes', (c) => c.json({ episodes: store.list(idOf(c)) }));

  // Every episode of the instance, newest first, of one outcome when asked (the dashboard's "show me the failures").
  app.get('/v1/episodes', (c) => {
    const outcome = c.req.query('outcome');
    if (outcome !== undefined && !OUTCOME_RE.test(outcome)) throw new ValidationError('outcome', 'must be success, failure, unscored or an outcome word');
    const limit = intQuery(c, 'limit', 1, MAX_PAGE) ?? 1000;
    return c.json({ episodes: store.listAll({ ...(outcome ? { outcome } : {}), limit }), bytes: store.totalBytes, maxBytes: store.limits.hostBytes });
  });

  app.delete('/v1/sessions/:id/episodes/:generation', (c) => {
    const id = idOf(c);
    store.remove(id, generationOf(c));
    return c.body(null, 204);
  });

  app.get('/v1/sessions/:id/episodes/:generation', async (c) => {
    const id = idOf(c);
    const generation = generationOf(c);
    const from = intQuery(c, 'from', 0, Number.MAX_SAFE_INTEGER) ?? 0;
    const limit = intQuery(c, 'limit', 1, MAX_PAGE) ?? MAX_PAGE;
    const withSteps = flagQuery(c, 'steps');
    const { summary, events, end } = await store.read(id, generation);
    const page = events.slice(from, from + limit);
    const derived = withSteps ? stepsOf(events) : undefined;
    return c.json({
      episode: summary,
      ...(derived ? { steps: derived.steps, initialFrame: derived.initialFrame, timeline: derived.timeline } : {}),
      events: page,
      next: from + page.length < events.length ? from + page.length : null,
      end,
    });
  });

  app.get('/v1/sessions/:id/episodes/:generation/files/:name', async (c) => {
    const id = idOf(c);
    const generation = generationOf(c);
    const name = c.req.param('name') ?? '';
    const data = await store.file(id, generation, name);
    const type = FILE_TYPES[name.split('.').pop() ?? ''] ?? 'application/octet-stream';
    return c.body(new Uint8Array(data), 200, { 'content-type': type, 'cache-control': 'private, max-age=31536000, immutable' });
  });

  app.post('/v1/sessions/:id/episodes/:generation/outcome', async (c) => {
    const id = idOf(c);
    const generation = generationOf(c);
    const o = parseOutcome(await ctx.body(c));
    // 404 before anything is written for an episode that was never recorded.
    store.summary(id, generation);
    return c.json(store.setOutcome(id, generation, o));
  });

  return app;
}
