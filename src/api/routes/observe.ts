import { Hono, type Context } from 'hono';
import type { Region } from '../../display/screenshot.ts';
import { toOsworldXml, terminalText } from '../../a11y/osworld-xml.ts';
import type { Session } from '../../session/manager.ts';
import { displayCall, type RouteContext } from '../request.ts';
import { checkShot, imageHeaders, serverTiming } from './actions.ts';
import { bad, parseBool } from './params.ts';

/** Observe: the screenshot (GET; one with actions is POST /actions), the accessibility tree and a terminal's text. */

const FORMATS = ['png', 'jpeg', 'webp', 'raw'] as const;
type Format = (typeof FORMATS)[number];

function parseFormat(v: unknown, field = 'format'): Format {
  if (v === undefined) return 'png';
  if (typeof v !== 'string' || !(FORMATS as readonly string[]).includes(v))
    throw bad(field, `must be png, jpeg, webp or raw, got ${JSON.stringify(v)}`, 'invalid_format');
  return v as Format;
}

function parseQuality(v: unknown, field = 'quality'): number | undefined {
  if (v === undefined) return undefined;
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 100) throw bad(field, 'must be an integer within 1..100', 'invalid_format');
  return n;
}

function parseRegionQuery(v: string | undefined): Region | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d+),(\d+),(\d+),(\d+)$/.exec(v);
  if (!m) throw bad('region', 'must be x,y,w,h (non-negative integers)', 'invalid_region');
  return { x: Number(m[1]), y: Number(m[2]), width: Number(m[3]), height: Number(m[4]) };
}

function parseScaleQuery(v: string | undefined): { width: number; height: number } | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(v);
  if (!m) throw bad('scale', 'must be WxH, e.g. 1024x640', 'invalid_region');
  return { width: Number(m[1]), height: Number(m[2]) };
}

const A11Y_DEFAULTS = { maxDepth: 50, maxWidth: 1024 };

function parseLimit(v: string | undefined, field: string, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,6}$/.test(v) || Number(v) < 1 || Number(v) > max) throw bad(field, `must be an integer within 1..${max}`);
  return Number(v);
}

export function observeRoutes(ctx: RouteContext) {
  const { display } = ctx;
  const app = new Hono();
  app.get('/v1/sessions/:id/screenshot', async (c) => {
    const s = ctx.ready(c);
    // Checked once, then captured as resolved.
    const resolved = checkShot(s, {
      format: parseFormat(c.req.query('format')),
      quality: parseQuality(c.req.query('quality')),
      region: parseRegionQuery(c.req.query('region')),
      scale: parseScaleQuery(c.req.query('scale')),
      cursor: parseBool(c.req.query('cursor'), 'cursor'),
    });
    const t0 = performance.now();
    const shot = await displayCall(async () => display.frame(s, await display.connection(s), resolved));
    s._episode?.screenshot(shot, Date.now());
    const h = {
      ...imageHeaders(shot, s.generation),
      // Capture + encode time in the daemon, apart from the transfer (W3C Server-Timing), then its stages.
      'server-timing': serverTiming(shot, performance.now() - t0),
    };
    return c.body(new Uint8Array(shot.data), 200, h);
  });

  const walk = async (c: Context, s: Session) => {
    const maxDepth = parseLimit(c.req.query('maxDepth'), 'maxDepth', 1000) ?? A11Y_DEFAULTS.maxDepth;
    const maxWidth = parseLimit(c.req.query('maxWidth'), 'maxWidth', 100_000) ?? A11Y_DEFAULTS.maxWidth;
    const reference = c.req.query('reference');
    if (reference !== undefined && reference !== 'true' && reference !== 'false')
      throw bad('reference', `must be true or false, got '${reference.slice(0, 32)}'`);
    const useMirror = c.req.query('mirror');
    if (useMirror !== undefined && useMirror !== 'true' && useMirror !== 'false') throw bad('mirror', `must be true or false, got '${useMirror.slice(0, 32)}'`);
    const client = await display.a11y(s);
    // The reference walk: every object call by call over the bus, what the fast path is tested against.
    // Otherwise: objects from the session's event mirror where it holds them, the rest over each app's socket.
    const mirror = reference === 'true' || useMirror === 'false' ? undefined : await display.a11yMirror(s);
    const how = reference === 'true' ? { cache: false } : { direct: display.a11yDirect(s), ...(mirror ? { mirror } : {}) };
    const { tree, stats } = await client.walk({ maxDepth, maxWidth, deadlineMs: display.a11yDeadlineMs, signal: c.req.raw.signal, ...how });
    const status = reference === 'true' || useMirror === 'false' ? undefined : display.a11yMirrorStatus(s);
    return { tree, stats: status ? { ...stats, mirror: status } : stats, maxDepth, maxWidth };
  };

  app.get('/v1/sessions/:id/a11y', async (c) => {
    const s = ctx.ready(c);
    const format = c.req.query('format') ?? 'xml';
    if (format !== 'xml' && format !== 'json') throw bad('format', `must be xml or json, got '${format.slice(0, 32)}'`, 'invalid_format');
    const at = Date.now();
    const { tree, stats, maxDepth, maxWidth } = await walk(c, s);
    c.header('x-drums-generation', String(s.generation));
    if (format === 'json') {
      s._episode?.tree(JSON.stringify(tree), 'json', at);
      return c.json({ generation: s.generation, tree, stats });
    }
    const xml = toOsworldXml(tree, { maxDepth, maxWidth });
    s._episode?.tree(xml, 'xml', at);
    return c.body(xml, 200, { 'content-type': 'text/xml; charset=utf-8' });
  });

  app.get('/v1/sessions/:id/terminal', async (c) => {
    const s = ctx.ready(c);
    const apps = c.req.query('apps');
    const { tree } = await walk(c, s);
    const text = terminalText(tree, apps ? { apps: apps.split(',') } : {});
    return c.json({ text, generation: s.generation });
  });
  return app;
}
