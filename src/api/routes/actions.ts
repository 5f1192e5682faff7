import { Hono } from 'hono';
import { DrumsError } from '../../common/errors.ts';
import { normalizeBatch, runCanonical, type ActionResult } from '../../display/actions/index.ts';
import type { ScreenshotOptions, ScreenshotResult } from '../../display/screenshot.ts';
import { type ResolvedShot, resolveShot } from '../../display/frames.ts';
import type { ActionsRequest } from '../../protocol/generated/types.ts';
import type { Session } from '../../session/manager.ts';
import { displayCall, type RouteContext } from '../request.ts';
import { TAKEOVER_HEADER } from '../frames/takeover.ts';
import { checkBody } from '../spec-validate.ts';
import { bad } from './params.ts';

/**
 * POST /v1/sessions/{id}/actions: a batch of actions, in any vocabulary, and the screenshot after
 * it. The screenshot's checks and its answer (JSON, or the image bytes) live here, beside the one
 * route on the POST /actions trace (docs/architecture.md), and GET /screenshot (observe.ts) uses
 * them: kept here, the action path runs code in one route file.
 */

function screenOf(s: Session) {
  return { width: s.spec.screen.width, height: s.spec.screen.height };
}

/**
 * W3C Server-Timing of a frame: `capture` (all of it, in the daemon), then its stages when it
 * was captured rather than reused (FrameTiming: cursor, grab, draw, colour, encode).
 */
export function serverTiming(shot: ScreenshotResult, totalMs: number): string {
  const parts = [`capture;dur=${totalMs.toFixed(2)}`];
  const t = shot.timing;
  if (t) for (const k of ['cursor', 'grab', 'draw', 'colour', 'encode'] as const) parts.push(`${k};dur=${t[k].toFixed(2)}`);
  if (t?.bands) parts.push(`bands;desc="${t.bands[0]}/${t.bands[1]}"`);
  return parts.join(', ');
}

/** Validates screenshot options fully (region against the screen too) before any capture; the resolved frame. */
export function checkShot(s: Session, o: ScreenshotOptions, prefix = ''): ResolvedShot {
  const screen = screenOf(s);
  const shot = resolveShot(o, screen, prefix);
  // Scaling is for fitting a model's input size: never larger than the screen (a raw
  // 8192x8192 frame would be 200 MB).
  const sc = o.scale as { width?: number; height?: number } | undefined;
  if (sc && ((sc.width ?? 0) > screen.width || (sc.height ?? 0) > screen.height)) {
    throw bad(`${prefix}scale`, `must not exceed the screen (${screen.width}x${screen.height})`, 'invalid_region');
  }
  return shot;
}

export function shotJson(r: ScreenshotResult) {
  return {
    format: r.format,
    width: r.width,
    height: r.height,
    mimeType: r.mimeType,
    ...(r.scaleX !== undefined ? { scaleX: r.scaleX, scaleY: r.scaleY } : {}),
    data: r.data.toString('base64'),
  };
}

/**
 * Binary answers: when a client asks for the image itself (`Accept: image/png`, or the
 * mime type of the requested format), POST /actions answers with the image bytes as the body and
 * the JSON (generation, results) in the `x-drums-actions` header, so no base64 and no JSON
 * parsing of megabytes. The JSON falls back to the body (the usual JSON response) when it would
 * not fit in a header (over 16 KiB, e.g. a batch of hundreds of actions): clients branch on the
 * response's content-type.
 */
export const ACTIONS_HEADER = 'x-drums-actions';
export const MAX_HEADER_JSON = 16 * 1024;

/** Whether the Accept header asks for this image type (exactly, or image/* for the image formats). */
export function wantsBinary(accept: string | undefined, mimeType: string): boolean {
  if (!accept) return false;
  const types = accept.split(',').map((t) => t.split(';')[0].trim().toLowerCase());
  if (types.includes(mimeType)) return true;
  return mimeType.startsWith('image/') && types.includes('image/*');
}

/** JSON with every non-ASCII character escaped, so it is a valid header value. */
export function asciiJson(v: unknown): string {
  return JSON.stringify(v).replace(/[\u007f-\uffff]/g, (ch) => '\\u' + ch.charCodeAt(0).toString(16).padStart(4, '0'));
}

/** Headers that describe an image response (shared by GET /screenshot and binary POST /actions). */
export function imageHeaders(shot: ScreenshotResult, generation: number): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': shot.mimeType,
    'x-drums-generation': String(generation),
    'x-drums-width': String(shot.width),
    'x-drums-height': String(shot.height),
  };
  if (shot.scaleX !== undefined) {
    h['x-drums-scale-x'] = String(shot.scaleX);
    h['x-drums-scale-y'] = String(shot.scaleY);
  }
  return h;
}

function resultJson(r: ActionResult) {
  return {
    index: r.index,
    type: r.type,
    ms: Math.round(r.ms * 10) / 10,
    ...(r.cursor ? { cursor: r.cursor } : {}),
    ...(r.status ? { status: r.status } : {}),
    ...(r.screenshot ? { screenshot: shotJson(r.screenshot) } : {}),
  };
}

export function actionRoutes(ctx: RouteContext) {
  const { display } = ctx;
  const app = new Hono();
  app.post('/v1/sessions/:id/actions', async (c) => {
    const body = await ctx.body(c);
    const s = ctx.ready(c, (body as { generation?: unknown } | null)?.generation);
    ctx.display.takeovers.checkInput(s, c.req.header(TAKEOVER_HEADER));
    // The body's shape, once: the spec's schema (unknown fields, at most 1000 actions, the
    // screenshot options; each field's error code from BODY_CODES).
    checkBody('runActions', body);
    const b = body as ActionsRequest;
    // Then what no schema can say, once, before anything runs: every action, in any vocabulary,
    // against the screen (normalizeBatch; runCanonical trusts its steps), and the screenshot's
    // region and scale (the resolved frame is captured as is).
    const steps = normalizeBatch(b.actions, { screen: screenOf(s), scale: b.scale });
    const so = b.screenshot === true ? {} : b.screenshot || undefined;
    const shotOpts = so ? checkShot(s, { ...so, scale: so.scale ?? b.scale }, 'screenshot.') : undefined;
    const generation = s.generation;
    const d = await display.connection(s);
    const rec = s._episode;
    // The batch in the canonical schema (docs/actions.md), each action with the index of the agent's action it came from.
    const canonical = rec ? steps.map((st) => ({ ...st.action, index: st.index })) : undefined;
    const at = Date.now();
    const t0 = performance.now();
    // A client that goes away stops the batch between actions (and cuts a wait short).
    let results: ActionResult[];
    let shot: ScreenshotResult | undefined;
    let actMs = 0,
      shotMs = 0;
    try {
      results = await displayCall(() => runCanonical(d, steps, { signal: c.req.raw.signal }));
      const t1 = performance.now();
      actMs = t1 - t0;
      shot = shotOpts ? await displayCall(() => display.frame(s, d, shotOpts)) : undefined;
      shotMs = performance.now() - t1;
    } catch (e) {
      const err = e instanceof DrumsError ? { code: e.code, message: e.message } : { code: 'internal', message: String(e) };
      rec?.actions({ at, ms: performance.now() - t0, actions: b.actions, steps: canonical, results: null, error: err });
      throw e;
    }
    rec?.actions({
      at,
      ms: performance.now() - t0,
      actions: b.actions,
      steps: canonical,
      results: results.map((r) => ({ ...resultJson(r), screenshot: undefined })),
      shot,
    });
    c.header('server-timing', `actions;dur=${actMs.toFixed(2)}${shot ? `, ${serverTiming(shot, shotMs)}` : ''}`);
    if (shot && wantsBinary(c.req.header('accept'), shot.mimeType)) {
      // Image bytes as the body, the JSON in a header (wantsBinary above).
      const meta = asciiJson({ generation, results: results.map(resultJson) });
      if (meta.length <= MAX_HEADER_JSON) return c.body(new Uint8Array(shot.data), 200, { ...imageHeaders(shot, generation), [ACTIONS_HEADER]: meta });
    }
    return c.json({ generation, results: results.map(resultJson), ...(shot ? { screenshot: shotJson(shot) } : {}) });
  });
  return app;
}
