import { Hono, type Context } from 'hono';
import { DrumsError, ValidationError, type ErrorCode } from '../../common/errors.ts';
import { DisplayError } from '../../display/errors.ts';
import { normalizeBatch, runCanonical, type ActionResult } from '../../display/actions.ts';
import type { Region, ScreenshotOptions, ScreenshotResult } from '../../display/screenshot.ts';
import { captureResolved, type ResolvedShot, resolveShot } from '../../display/frames.ts';
import type { ActionsRequest } from '../../protocol/generated/types.ts';
import { toOsworldXml, terminalText } from '../../a11y/osworld-xml.ts';
import { execInSession, execStream, parseExec } from '../../session/exec.ts';
import type { Session } from '../../session/manager.ts';
import { deleteFile, listDir, readFile, statFile, validateMode, validatePath, writeFile, type Target } from '../../session/files.ts';
import type { RouteContext } from '../request.ts';
import { TAKEOVER_HEADER } from '../frames/takeover.ts';
import { checkBody } from '../spec-validate.ts';

/**
 * Observe and act: screenshots, action batches, the accessibility tree,
 * windows, exec (buffered, or streamed with `?stream=1`) and session files.
 */

const FORMATS = ['png', 'jpeg', 'webp', 'raw'] as const;
type Format = (typeof FORMATS)[number];

function bad(field: string, message: string, code: ErrorCode = 'invalid_request'): DrumsError {
  return new ValidationError(field, message, code);
}

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

function parseBool(v: string | undefined, field: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (['1', 'true', 'yes'].includes(v)) return true;
  if (['0', 'false', 'no'].includes(v)) return false;
  throw bad(field, 'must be true or false');
}

function screenOf(s: Session) {
  return { width: s.spec.screen.width, height: s.spec.screen.height };
}

/** Validates screenshot options fully (region against the screen too) before any capture; the resolved frame. */
function checkShot(s: Session, o: ScreenshotOptions, prefix = ''): ResolvedShot {
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

function shotJson(r: ScreenshotResult) {
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

/** A display-layer error rethrown with JSON-safe details (no image buffers). */
function cleanDisplayError(e: unknown): unknown {
  if (!(e instanceof DisplayError)) return e;
  const d = { ...(e.details ?? {}) } as Record<string, unknown>;
  if (Array.isArray(d.results)) {
    d.completed = (d.results as ActionResult[]).length;
    delete d.results;
  }
  delete d.socketPath;
  return new DrumsError(e.code, e.message, { details: d, cause: e });
}

function parseWid(v: string | undefined): number {
  const s = v ?? '';
  const n = /^0x[0-9a-f]{1,8}$/i.test(s) ? parseInt(s, 16) : /^\d{1,10}$/.test(s) ? Number(s) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 0xffffffff) throw bad('wid', 'must be a window id (decimal or 0x hex)');
  return n;
}

function queryRoot(c: Context): boolean {
  return parseBool(c.req.query('root'), 'root') ?? false;
}

const A11Y_DEFAULTS = { maxDepth: 50, maxWidth: 1024 };

function parseLimit(v: string | undefined, field: string, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,6}$/.test(v) || Number(v) < 1 || Number(v) > max) throw bad(field, `must be an integer within 1..${max}`);
  return Number(v);
}

export function displayRoutes(ctx: RouteContext) {
  const { mgr, display } = ctx;
  const app = new Hono();
  const target = (s: Session): Target => ({ runtime: mgr.runtime, container: s.names.container });
  /**
   * Session and readiness, for every route here. An expected generation in the query or header
   * was checked once, by the pipeline (request.ts); one in the body (`fromBody`) is checked here.
   */
  const ready = (c: Context, fromBody?: unknown): Session => {
    const s = ctx.session(c);
    if (fromBody !== undefined && fromBody !== null) ctx.checkGeneration(c, s, fromBody);
    ctx.usable(s);
    return s;
  };
  const guard = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (e) {
      throw cleanDisplayError(e);
    }
  };

  app.get('/v1/sessions/:id/screenshot', async (c) => {
    const s = ready(c);
    // Checked once, then captured as resolved.
    const resolved = checkShot(s, {
      format: parseFormat(c.req.query('format')),
      quality: parseQuality(c.req.query('quality')),
      region: parseRegionQuery(c.req.query('region')),
      scale: parseScaleQuery(c.req.query('scale')),
      cursor: parseBool(c.req.query('cursor'), 'cursor'),
    });
    const t0 = performance.now();
    const shot = await guard(async () => captureResolved((await display.connection(s)).conn, resolved));
    s._episode?.screenshot(shot, Date.now());
    const h = {
      ...imageHeaders(shot, s.generation),
      // Capture + encode time in the daemon, apart from the transfer (W3C Server-Timing).
      'server-timing': `capture;dur=${(performance.now() - t0).toFixed(2)}`,
    };
    return c.body(new Uint8Array(shot.data), 200, h);
  });

  app.post('/v1/sessions/:id/actions', async (c) => {
    const body = await ctx.body(c);
    const s = ready(c, (body as { generation?: unknown } | null)?.generation);
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
    try {
      results = await guard(() => runCanonical(d, steps, { signal: c.req.raw.signal }));
      shot = shotOpts ? await guard(() => captureResolved(d.conn, shotOpts)) : undefined;
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
    if (shot && wantsBinary(c.req.header('accept'), shot.mimeType)) {
      // Image bytes as the body, the JSON in a header (wantsBinary above).
      const meta = asciiJson({ generation, results: results.map(resultJson) });
      if (meta.length <= MAX_HEADER_JSON) return c.body(new Uint8Array(shot.data), 200, { ...imageHeaders(shot, generation), [ACTIONS_HEADER]: meta });
    }
    return c.json({ generation, results: results.map(resultJson), ...(shot ? { screenshot: shotJson(shot) } : {}) });
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
    const s = ready(c);
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
    const s = ready(c);
    const apps = c.req.query('apps');
    const { tree } = await walk(c, s);
    const text = terminalText(tree, apps ? { apps: apps.split(',') } : {});
    return c.json({ text, generation: s.generation });
  });

  app.get('/v1/sessions/:id/windows', async (c) => {
    const s = ready(c);
    const d = await display.connection(s);
    const [list, active, cursor] = await guard(() => Promise.all([d.listWindows(), d.activeWindow(), d.cursorPosition()]));
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
      const s = ready(c);
      ctx.display.takeovers.checkInput(s, c.req.header(TAKEOVER_HEADER));
      const d = await display.connection(s);
      const list = await guard(() => d.listWindows());
      if (!list.some((w) => w.id === wid))
        throw new DrumsError('window_not_found', `no managed window ${wid} in session ${s.id}; list them with GET /v1/sessions/${s.id}/windows`, {
          details: { wid },
        });
      await guard(() => (op === 'activate' ? d.activateWindow(wid) : d.closeWindow(wid)));
      return c.json({ ok: true, id: wid, generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
    });
  }

  // Exec: one JSON answer, or with ?stream=1 NDJSON lines as the command writes them.
  // A client that goes away kills the command either way.
  app.post('/v1/sessions/:id/exec', async (c) => {
    const stream = parseBool(c.req.query('stream'), 'stream');
    const s = ctx.session(c);
    const json = await ctx.body(c);
    const req = parseExec(json);
    checkBody('execInSession', json);
    // (The expected generation was checked by the pipeline, request.ts.)
    ctx.usable(s);
    if (!stream) {
      // The body's parts go out one at a time, with the socket's backpressure (see execInSession).
      const parts = await execInSession(target(s), req, c.req.raw.signal, { generation: s.generation });
      const body = new ReadableStream<Uint8Array>({
        pull(ctrl) {
          const p = parts.shift();
          if (p) ctrl.enqueue(p);
          else ctrl.close();
        },
      });
      return new Response(body, { status: 200, headers: { 'content-type': 'application/json' } });
    }
    const generation = s.generation;
    const enc = new TextEncoder();
    const abort = new AbortController();
    // Backpressure: past 16 queued records the command's output is paused until the client reads (pull), so a
    // slow reader holds the command, not the daemon's memory. A client that goes away resumes it (drained, dropped).
    let resume = () => {};
    const body = new ReadableStream<Uint8Array>(
      {
        start(ctrl) {
          const send = (o: unknown): boolean => {
            try {
              ctrl.enqueue(enc.encode(JSON.stringify(o) + '\n'));
              return (ctrl.desiredSize ?? 1) > 0;
            } catch {
              return true; // client gone: drain
            }
          };
          execStream(
            target(s),
            req,
            (stream, data) => send({ stream, data }),
            abort.signal,
            (r) => {
              resume = r;
            },
          ).then(
            (r) => {
              send({ ...r, durationMs: Math.round(r.durationMs * 10) / 10, generation });
              try {
                ctrl.close();
              } catch {}
            },
            (e) => {
              send({ error: { code: 'internal', message: String((e as Error).message) } });
              try {
                ctrl.close();
              } catch {}
            },
          );
        },
        pull() {
          resume();
        },
        cancel() {
          abort.abort();
          resume();
        },
      },
      new CountQueuingStrategy({ highWaterMark: 16 }),
    );
    return new Response(body, { status: 200, headers: { 'content-type': 'application/x-ndjson', 'x-drums-generation': String(generation) } });
  });

  // Files, confined to the session (see src/session/files.ts).
  app.get('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const s = ready(c);
    const data = await readFile(target(s), path, root);
    return c.body(new Uint8Array(data), 200, { 'content-type': 'application/octet-stream', 'x-drums-generation': String(s.generation) });
  });
  app.put('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const mode = validateMode(c.req.query('mode'));
    const root = queryRoot(c);
    const s = ready(c);
    const buf = Buffer.from(await c.req.arrayBuffer());
    if (buf.length > ctx.maxBodyBytes) throw new DrumsError('payload_too_large', `request body is over ${ctx.maxBodyBytes} bytes`);
    await writeFile(target(s), path, buf, mode, root);
    return c.json({ path, size: buf.length, mode, generation: s.generation }, 201);
  });
  app.delete('/v1/sessions/:id/files', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const recursive = parseBool(c.req.query('recursive'), 'recursive') ?? false;
    const s = ready(c);
    await deleteFile(target(s), path, root, recursive);
    return c.body(null, 204);
  });
  app.get('/v1/sessions/:id/files/list', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const s = ready(c);
    const r = await listDir(target(s), path, root);
    return c.json({ path, ...r, generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
  });
  app.get('/v1/sessions/:id/files/stat', async (c) => {
    const path = validatePath(c.req.query('path'));
    const root = queryRoot(c);
    const follow = parseBool(c.req.query('follow'), 'follow') ?? false;
    const s = ready(c);
    return c.json({ ...(await statFile(target(s), path, root, follow)), generation: s.generation }, 200, { 'x-drums-generation': String(s.generation) });
  });
  return app;
}
