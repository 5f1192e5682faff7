/**
 * GET /v1/sessions/:id/stream: a WebSocket per viewer or agent. The server sends
 *   text  {"type":"hello", session, generation, width, height, format, fps, takeover}
 *   binary frames (the image bytes, `format` at `width`x`height`), driven by damage: a frame
 *         goes out only when the screen or the cursor changed (the frame cache says so), at
 *         most `fps` per second; while the socket still holds an unsent frame, new frames are
 *         dropped, never queued;
 *   text  {"type":"state", state, generation, takeover} when any of them changes;
 *   text  {"type":"result", id, generation, results} / {"type":"error", id, error:{code,message}}
 *         for each input message.
 * The client sends text {"id"?, "actions": [...]}: the canonical (or any) action vocabulary of
 * docs/actions.md, in the stream's image coordinates when it is scaled, validated whole before
 * anything runs, refused with `session_taken_over` while someone else holds the session.
 */
import { Hono, type Context } from 'hono';
import type { WebSocket } from 'ws';
import { DrumsError, type DrumsErrorCode } from '../../common/errors.ts';
import { normalizeActions, runActions, type ActionResult } from '../../display/actions/index.ts';
import type { ScreenshotOptions } from '../../display/screenshot.ts';
import type { Session } from '../../session/manager.ts';
import type { RouteContext } from '../request.ts';
import { takeoverView } from './takeover.ts';
import { upgradeTicket } from './upgrade.ts';

export const MAX_STREAM_FPS = 30;
const FORMATS = ['jpeg', 'webp', 'png'] as const;
type StreamFormat = (typeof FORMATS)[number];
const QUERY = ['fps', 'format', 'quality', 'scale', 'cursor', 'takeover', 'generation'];

export interface StreamOptions {
  fps: number;
  format: StreamFormat;
  quality: number;
  /** Output size; undefined = the screen's. */
  scale?: { width: number; height: number };
  cursor: boolean;
  takeover?: string;
}

function bad(field: string, message: string, code: DrumsErrorCode): DrumsError {
  return new DrumsError(code, `${field}: ${message}`, { details: { field } });
}

/** The stream's query, checked whole (400 invalid_request / invalid_format / invalid_region). */
export function parseStreamQuery(q: Record<string, string>, screen: { width: number; height: number }): StreamOptions {
  for (const k of Object.keys(q)) if (!QUERY.includes(k)) throw bad(k.slice(0, 40), `unknown query parameter; allowed: ${QUERY.join(', ')}`, 'invalid_request');
  const fpsRaw = q.fps ?? '5';
  const fps = Number(fpsRaw);
  if (!/^\d{1,3}(\.\d{1,3})?$/.test(fpsRaw) || !(fps >= 0.1 && fps <= MAX_STREAM_FPS))
    throw bad('fps', `must be a number within 0.1..${MAX_STREAM_FPS}, got '${fpsRaw.slice(0, 40)}'`, 'invalid_request');
  const format = (q.format ?? 'jpeg') as StreamFormat;
  if (!FORMATS.includes(format)) throw bad('format', `must be jpeg, webp or png, got '${String(q.format).slice(0, 40)}'`, 'invalid_format');
  const qRaw = q.quality ?? '70';
  const quality = Number(qRaw);
  if (!/^\d{1,3}$/.test(qRaw) || quality < 1 || quality > 100) throw bad('quality', 'must be an integer within 1..100', 'invalid_format');
  let scale: StreamOptions['scale'];
  if (q.scale !== undefined) {
    const m = /^(\d{1,5})x(\d{1,5})$/.exec(q.scale);
    const f = /^(0?\.\d{1,4}|1(\.0{1,4})?)$/.exec(q.scale);
    if (m) scale = { width: Number(m[1]), height: Number(m[2]) };
    else if (f && Number(q.scale) > 0)
      scale = { width: Math.max(1, Math.round(screen.width * Number(q.scale))), height: Math.max(1, Math.round(screen.height * Number(q.scale))) };
    else throw bad('scale', 'must be WxH (e.g. 320x200) or a factor within 0..1 (e.g. 0.25)', 'invalid_region');
    if (scale.width < 1 || scale.height < 1 || scale.width > screen.width || scale.height > screen.height)
      throw bad('scale', `must be within 1x1..${screen.width}x${screen.height}`, 'invalid_region');
    if (scale.width === screen.width && scale.height === screen.height) scale = undefined;
  }
  const cursor =
    q.cursor === undefined
      ? true
      : ['1', 'true'].includes(q.cursor)
        ? true
        : ['0', 'false'].includes(q.cursor)
          ? false
          : (() => {
              throw bad('cursor', 'must be true or false', 'invalid_request');
            })();
  return { fps, format, quality, scale, cursor, ...(q.takeover ? { takeover: q.takeover } : {}) };
}

export interface StreamCounters {
  sent: number;
  dropped: number;
  unchanged: number;
  sockets: number;
}
/** Counters over every stream of the daemon (the bench reads them from GET /v1/streams). */
export const streamCounters: StreamCounters = { sent: 0, dropped: 0, unchanged: 0, sockets: 0 };

function sendJson(ws: WebSocket, o: unknown): void {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(o));
}

function runStream(ctx: RouteContext, s: Session, o: StreamOptions, ws: WebSocket): void {
  const reg = ctx.display.takeovers;
  const shot: ScreenshotOptions = { format: o.format, quality: o.quality, cursor: o.cursor, boxScale: true, ...(o.scale ? { scale: o.scale } : {}) };
  const interval = 1000 / o.fps;
  const width = o.scale?.width ?? s.spec.screen.width;
  const height = o.scale?.height ?? s.spec.screen.height;
  let closed = false;
  let lastData: Buffer | undefined;
  let lastSig = '';
  let timer: NodeJS.Timeout | undefined;
  let inputChain: Promise<unknown> = Promise.resolve();
  streamCounters.sockets++;
  const sig = () => `${s.state}/${s.generation}/${reg.get(s)?.id ?? ''}`;
  const state = () => ({ type: 'state', state: s.state, generation: s.generation, takeover: takeoverView(reg.get(s)) });
  sendJson(ws, { type: 'hello', session: s.id, generation: s.generation, width, height, format: o.format, fps: o.fps, takeover: takeoverView(reg.get(s)) });
  lastSig = sig();

  const tick = async () => {
    timer = undefined;
    if (closed) return;
    const t0 = performance.now();
    if (!ctx.mgr.list().includes(s)) {
      sendJson(ws, { type: 'end', reason: 'destroyed' });
      ws.close(1000, 'session destroyed');
      return;
    }
    if (sig() !== lastSig) {
      lastSig = sig();
      lastData = undefined;
      sendJson(ws, state());
    }
    if (s.state === 'ready') {
      if (ws.bufferedAmount > 0) streamCounters.dropped++;
      else {
        try {
          const r = await ctx.display.screenshot(s, shot);
          if (r.data === lastData) streamCounters.unchanged++;
          else if (!closed) {
            if (ws.bufferedAmount > 0) streamCounters.dropped++;
            else {
              ws.send(r.data, { binary: true });
              lastData = r.data;
              streamCounters.sent++;
            }
          }
        } catch {
          /* mid-reset or broken: the next state message says so */
        }
      }
    }
    if (!closed) timer = setTimeout(tick, Math.max(0, interval - (performance.now() - t0)));
  };
  timer = setTimeout(tick, 0);

  ws.on('message', (data, isBinary) => {
    let id: unknown;
    const fail = (e: unknown) => {
      const code = (e as { code?: string }).code ?? 'internal';
      sendJson(ws, { type: 'error', id, error: { code: typeof code === 'string' ? code : 'internal', message: (e as Error).message ?? String(e) } });
    };
    try {
      if (isBinary) throw new DrumsError('invalid_action', 'input messages are JSON text {id?, actions: [...]}');
      let msg: unknown;
      try {
        msg = JSON.parse(data.toString());
      } catch {
        throw new DrumsError('invalid_json', 'input message is not valid JSON');
      }
      if (!msg || typeof msg !== 'object' || Array.isArray(msg)) throw new DrumsError('invalid_action', 'message: must be an object {id?, actions: [...]}');
      const m = msg as Record<string, unknown>;
      id = m.id;
      for (const k of Object.keys(m))
        if (k !== 'id' && k !== 'actions') throw new DrumsError('invalid_action', `${k.slice(0, 40)}: unknown field; allowed: id, actions`);
      if (!Array.isArray(m.actions) || m.actions.length > 1000) throw new DrumsError('invalid_action', 'actions: must be an array of at most 1000 actions');
      ctx.usable(s);
      const scale = o.scale;
      normalizeActions(m.actions, { screen: { width: s.spec.screen.width, height: s.spec.screen.height }, scale });
      const actions = m.actions;
      inputChain = inputChain.then(async () => {
        try {
          // Checked when the batch runs: a take-over may have started since it arrived.
          reg.checkInput(s, o.takeover);
          ctx.usable(s);
          const generation = s.generation;
          const d = await ctx.display.connection(s);
          const results: ActionResult[] = await runActions(d, actions, { scale });
          sendJson(ws, { type: 'result', id, generation, results: results.map((r) => ({ index: r.index, type: r.type, ms: Math.round(r.ms * 10) / 10 })) });
          if (timer) {
            clearTimeout(timer);
            timer = setTimeout(tick, 0);
          }
        } catch (e) {
          fail(e);
        }
      });
    } catch (e) {
      fail(e);
    }
  });
  const end = () => {
    if (closed) return;
    closed = true;
    streamCounters.sockets--;
    if (timer) clearTimeout(timer);
  };
  ws.on('close', end);
  ws.on('error', end);
}

export function streamRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.get('/v1/sessions/:id/stream', (c: Context) => {
    const s = ctx.session(c);
    const o = parseStreamQuery(c.req.query(), s.spec.screen);
    ctx.usable(s);
    if (o.takeover !== undefined && ctx.display.takeovers.get(s)?.id !== o.takeover) {
      throw new DrumsError('takeover_not_found', `takeover: '${o.takeover.slice(0, 32)}' is not the take-over held on session ${s.id}`, {
        details: { field: 'takeover' },
      });
    }
    const ticket = upgradeTicket(c);
    if (!ticket) throw new DrumsError('upgrade_required', 'this is a WebSocket endpoint: connect with Upgrade: websocket (see docs/streaming.md)');
    ticket.accept((ws) => runStream(ctx, s, o, ws));
    return c.body(null, 204);
  });
  app.get('/v1/streams', (c) => c.json({ ...streamCounters }));
  return app;
}
