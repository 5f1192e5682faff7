// OSWorld's guest server contract (docs/osworld.md), served for one session by
// the host daemon: a Hono app (this file) on its own listener, 127.0.0.1:<free
// port>, through @hono/node-server like the daemon's API (service.ts). Every
// guest-side action runs inside the session through the runtime (guest-exec.ts);
// screenshots, the cursor and windows come from the daemon's X connection and
// the accessibility tree from its AT-SPI client. Nothing here may throw out of
// a handler: every failure becomes the route's own error shape.
//
// This file only assembles: the route table over the modules in routes/ and the
// pipeline around them (the Host and Origin check, Flask's 404/405 pages, the body
// limit of body.ts, the fair share, errors to replies); guest.ts holds what the
// routes share and prepare.ts the once-per-generation guest preparation.

import type { HttpBindings } from '@hono/node-server';
import { type Context, Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { Readable } from 'node:stream';
import { DrumsError, errorMessage } from '../common/errors.ts';
import { FAIR_RETRY_AFTER_S } from '../policy/fair-share.ts';
import { log } from '../common/log.ts';
import type { Session } from '../session/manager.ts';
import { limitBody, webBody } from './body.ts';
import { flaskPage, foreignRequest, type GuestContext, type Handler, json, type RecordingState, type Reply, type Req } from './guest.ts';
import { routeExecute, routeExecuteVerify, routeLaunch } from './routes/execute.ts';
import { routeChangeWallpaper, routeDownloadFile, routeFile, routeListDirectory, routeUpload, routeWallpaper } from './routes/files.ts';
import {
  routeAccessibility,
  routeCursor,
  routeDesktopPath,
  routePlatform,
  routeScreenSize,
  routeScreenshot,
  routeTerminal,
  routeWindowSize,
} from './routes/observe.ts';
import { routeEndRecording, routeStartRecording } from './routes/recording.ts';
import { routeRunBash, routeRunPython } from './routes/scripts.ts';
import { routeOpenFile, windowRoute } from './routes/windows.ts';

export { forgetSession } from './prepare.ts';

/**
 * The guest routes whose work is the daemon's (X captures and encodes, the accessibility tree, the
 * terminal's text, pointer input): they take their turn in the daemon's fair share between sessions
 * (src/policy/fair-share.ts), the same one as the API's observe/act routes. The rest run in the
 * session (its own cgroup) and may take long: they take no slot, but a session may have at most
 * DRUMS_FAIR_QUEUE of them in flight (`FairScheduler.bounded`).
 */
const QUEUED = new Set(['/screenshot', '/accessibility', '/terminal', '/cursor_position']);

/**
 * Routes that read their body as it arrives (`Req.stream`) instead of whole: an upload goes from the socket
 * through the multipart parser into the writer in the session, so the daemon holds a bounded part of it.
 */
const STREAMED = new Set(['/setup/upload']);

const ROUTES: Record<string, Partial<Record<string, Handler>>> = {
  '/execute': { POST: routeExecute },
  '/setup/execute': { POST: routeExecute },
  '/execute_with_verification': { POST: routeExecuteVerify },
  '/setup/execute_with_verification': { POST: routeExecuteVerify },
  '/setup/launch': { POST: routeLaunch },
  '/screenshot': { GET: routeScreenshot },
  '/terminal': { GET: routeTerminal },
  '/accessibility': { GET: routeAccessibility },
  '/screen_size': { POST: routeScreenSize },
  '/window_size': { POST: routeWindowSize },
  '/desktop_path': { POST: routeDesktopPath },
  '/wallpaper': { POST: routeWallpaper },
  '/list_directory': { POST: routeListDirectory },
  '/file': { POST: routeFile },
  '/setup/upload': { POST: routeUpload },
  '/platform': { GET: routePlatform },
  '/cursor_position': { GET: routeCursor },
  '/setup/change_wallpaper': { POST: routeChangeWallpaper },
  '/setup/download_file': { POST: routeDownloadFile },
  '/setup/open_file': { POST: routeOpenFile },
  '/setup/activate_window': { POST: windowRoute('a', 'Window activated successfully') },
  '/setup/close_window': { POST: windowRoute('c', 'Window closed successfully.') },
  '/start_recording': { POST: routeStartRecording },
  '/end_recording': { POST: routeEndRecording },
  '/run_python': { POST: routeRunPython },
  '/run_bash_script': { POST: routeRunBash },
};

/** On a socket, node-server's request and response; in `app.request()` (unit tests), none. */
export type GuestEnv = { Bindings: Partial<HttpBindings> };

/** How much of a streamed reply is queued ahead of the socket (node-server writes it with the socket's backpressure). */
const STREAM_CHUNK = 64 * 1024;

/**
 * A reply as a Response. A Readable body is streamed (chunked: node-server then writes no Content-Length of its
 * own, and a body that fails midway destroys the connection, so the client sees a short reply, never a
 * complete-looking one); any other body is sent whole with its length.
 */
export function toResponse(r: Reply): Response {
  const headers: Record<string, string> = { 'content-type': r.type ?? 'application/octet-stream', ...r.headers };
  if (r.body instanceof Readable) {
    const body = Readable.toWeb(r.body, { strategy: new ByteLengthQueuingStrategy({ highWaterMark: STREAM_CHUNK }) });
    return new Response(body as ReadableStream<Uint8Array>, { status: r.status, headers: { ...headers, 'transfer-encoding': 'chunked' } });
  }
  let data: Buffer;
  if (Buffer.isBuffer(r.body)) data = r.body;
  else if (typeof r.body === 'string') data = Buffer.from(r.body);
  else data = Buffer.from(JSON.stringify(r.body) + '\n');
  return new Response(new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset, data.length), {
    status: r.status,
    headers: { ...headers, 'content-length': String(data.length) },
  });
}

const NOT_FOUND = flaskPage(404, 'Not Found', 'The requested URL was not found on the server.');
const NOT_ALLOWED = flaskPage(405, 'Method Not Allowed', 'The method is not allowed for the requested URL.');

/** A failed handler's reply: the fair share's refusal, Flask's 400 page for a malformed body, else 500 with the message. */
function failure(e: unknown, path: string, id: string): Reply {
  if (e instanceof DrumsError && e.code === 'rate_limited') {
    return { ...json(429, { status: 'error', code: e.code, message: e.message }), headers: { 'retry-after': String(FAIR_RETRY_AFTER_S) } };
  }
  if (e instanceof HTTPException) return e.status === 400 ? flaskPage(400, 'Bad Request', e.message) : json(e.status, { status: 'error', message: e.message });
  log('warn', 'osworld route failed', { path, id, error: errorMessage(e) });
  return json(500, { status: 'error', message: errorMessage(e) });
}

/**
 * One session's guest app. `close()` stops a running recording (session destroy). On a socket, serve it with
 * node-server's `autoCleanupIncoming: false` (service.ts): the body limit below drains a refused body itself.
 */
export function guestApp(ctx: GuestContext) {
  const rec: RecordingState = {};
  const app = new Hono<GuestEnv>();

  // A web page's request (DNS rebinding, a cross-origin form) is refused before it is routed or run; the
  // connection closes after the answer (Node discards the body meanwhile, keeping none of it).
  app.use('*', async (c, next) => {
    const port = c.env?.incoming ? c.env.incoming.socket.localPort : Number(new URL(c.req.url).port) || undefined;
    const foreign = foreignRequest({ host: c.req.header('host'), origin: c.req.header('origin'), port });
    if (foreign) return toResponse({ ...foreign, headers: { connection: 'close' } });
    await next();
  });

  /** Answers without the body, which is read and dropped. */
  const without = (c: Context<GuestEnv>, r: Reply) => {
    c.env?.incoming?.resume();
    return toResponse(r);
  };

  const route = async (c: Context<GuestEnv>, path: string, method: string, h: Handler): Promise<Response> => {
    const incoming = c.env?.incoming;
    const outgoing = c.env?.outgoing;
    const ac = new AbortController();
    outgoing?.on('close', () => {
      if (!outgoing.writableFinished) ac.abort();
    });
    const input = incoming ?? webBody(c.req.raw.body);
    input.on('error', () => ac.abort());
    const streamed = STREAMED.has(path);
    // A body held whole (every route but the streamed ones) has its own, smaller limit.
    const limit = streamed ? ctx.mgr.config.osworldMaxBodyBytes : Math.min(ctx.mgr.config.osworldMaxBodyBytes, ctx.mgr.config.osworldMaxBufferedBodyBytes);
    const declared = c.req.header('content-length');
    const body = limitBody({ input, declared: declared === undefined ? undefined : Number(declared), outgoing }, limit, {
      streamed,
      // A streamed handler already running stops: its writer in the session ends without committing.
      onRefuse: () => ac.abort(),
    });
    const tooBig = () => toResponse(json(413, { status: 'error', message: `request body is over ${limit} bytes` }));
    const headers = c.req.header();

    const dispatch = async (s: Session, r: Req): Promise<Response> => {
      // A recorded session's episode gets every guest call, with what it asked and (for observations) what it got.
      const episode = s._episode;
      const at = Date.now();
      const t0 = performance.now();
      const run = episode
        ? () =>
            h(ctx, s, r, rec).then(
              (reply) => {
                episode.guest({ path, method, status: reply.status, at, ms: performance.now() - t0, body: r.body, reply: reply.body });
                return reply;
              },
              (e: unknown) => {
                episode.guest({ path, method, status: e instanceof HTTPException ? e.status : 500, at, ms: performance.now() - t0, body: r.body });
                throw e;
              },
            )
        : () => h(ctx, s, r, rec);
      const reply = await (QUEUED.has(path) ? ctx.fair.run(s.id, run) : ctx.fair.bounded(s.id, run)).catch((e: unknown) => failure(e, path, s.id));
      return toResponse(reply);
    };

    if (body.stream) {
      // Streamed: the handler starts now and reads the body as it comes; a refusal answers at once, whatever the handler does.
      if (body.isRefused()) return tooBig();
      const s = ctx.session();
      if (!s) {
        body.stream.resume();
        return toResponse(json(503, { status: 'error', message: 'the session is gone' }));
      }
      const work = dispatch(s, { path, headers, body: Buffer.alloc(0), stream: body.stream, signal: ac.signal })
        // What a streamed handler did not read (it answered early) is read and discarded, within the limit.
        .finally(() => body.stream?.resume())
        .then((res) => (body.isRefused() ? tooBig() : res));
      return Promise.race([work, body.refused.then(tooBig)]);
    }
    const whole = await body.whole;
    if (whole === undefined) return body.isRefused() ? tooBig() : new Response(null, { status: 400 });
    const s = ctx.session();
    if (!s) return toResponse(json(503, { status: 'error', message: 'the session is gone' }));
    return dispatch(s, { path, headers, body: whole, signal: ac.signal });
  };

  for (const [path, methods] of Object.entries(ROUTES)) {
    for (const [method, h] of Object.entries(methods)) app.on(method, path, (c) => route(c, path, method, h!));
    // Flask: a known path with another method is 405 (HEAD goes where GET does).
    app.all(path, (c) => without(c, NOT_ALLOWED));
  }
  app.notFound((c) => without(c, NOT_FOUND));
  app.onError((e, c) => {
    log('warn', 'osworld guest request failed', { path: c.req.path, error: errorMessage(e) });
    return toResponse(json(500, { status: 'error', message: errorMessage(e) }));
  });

  return {
    app,
    /** Stops a running recording (session destroy). */
    close() {
      rec.child?.kill('SIGKILL');
      rec.child = undefined;
    },
  };
}
