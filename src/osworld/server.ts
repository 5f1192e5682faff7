// OSWorld's guest server contract (docs/osworld.md), served for one session by
// the host daemon: a plain node:http listener on 127.0.0.1:<free port>. Every
// guest-side action runs inside the session through the runtime (guest-exec.ts);
// screenshots, the cursor and windows come from the daemon's X connection and
// the accessibility tree from its AT-SPI client. Nothing here may throw out of
// a handler: every failure becomes the route's own error shape.
//
// This file only assembles: the route table over the modules in routes/ and the
// dispatch (404/405 pages, the body limit, errors to replies); http.ts holds the
// plumbing and prepare.ts the once-per-generation guest preparation.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { PassThrough } from 'node:stream';
import { DrumsError, errorMessage } from '../common/errors.ts';
import { FAIR_RETRY_AFTER_S } from '../policy/fair-share.ts';
import { log } from '../common/log.ts';
import type { Session } from '../session/manager.ts';
import { flaskPage, foreignRequest, type GuestContext, type Handler, HttpError, json, type RecordingState, type Req, send } from './http.ts';
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

/** After a 413: how much more of the body is read (and discarded), and for how long, before the socket is destroyed. */
const OVER_LIMIT_DRAIN_BYTES = 8 * 1024 * 1024;
const OVER_LIMIT_DRAIN_MS = 5_000;

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

/** The request handler of one session's listener. */
export function guestHandler(ctx: GuestContext) {
  const rec: RecordingState = {};
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    // A web page's request (DNS rebinding, a cross-origin form) is refused before it is routed or run; the
    // connection closes after the answer (Node discards the body meanwhile, keeping none of it).
    const foreign = foreignRequest(req);
    if (foreign) return send(res, { ...foreign, headers: { connection: 'close' } });
    const path = (req.url ?? '/').split('?')[0]!;
    const route = ROUTES[path];
    const method = req.method === 'HEAD' ? 'GET' : (req.method ?? 'GET');
    if (!route) {
      req.resume();
      return send(res, flaskPage(404, 'Not Found', 'The requested URL was not found on the server.'));
    }
    const h = route[method];
    if (!h) {
      req.resume();
      return send(res, flaskPage(405, 'Method Not Allowed', 'The method is not allowed for the requested URL.'));
    }
    const ac = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) ac.abort();
    });
    // The body limit is enforced as soon as it is known to be passed: a declared Content-Length over it is answered
    // 413 before any byte of the body is read, and a body that grows past it (chunked, or longer than declared) at
    // the chunk that passes it. What the client still sends after the answer is discarded, but only up to
    // OVER_LIMIT_DRAIN_BYTES or OVER_LIMIT_DRAIN_MS (so an ordinary client that sends its whole body before it
    // reads the answer sees the 413, not a reset); past either, or when the declared length already says the
    // drain would not reach its end, the socket is destroyed once the answer is written.
    const streamed = STREAMED.has(path);
    // A body held whole (every route but the streamed ones) has its own, smaller limit.
    const limit = streamed ? ctx.mgr.config.osworldMaxBodyBytes : Math.min(ctx.mgr.config.osworldMaxBodyBytes, ctx.mgr.config.osworldMaxBufferedBodyBytes);
    const chunks: Buffer[] = [];
    /** A streamed route's body as it arrives (bounded: it pauses the request while the handler is behind). */
    const body = streamed ? new PassThrough() : undefined;
    let refused = false;
    const tooBig = (declared?: number) => {
      refused = true;
      chunks.length = 0;
      // A streamed handler already running stops: its writer in the session ends without committing.
      ac.abort();
      body?.destroy();
      const sock = req.socket;
      const t = setTimeout(() => sock.destroy(), OVER_LIMIT_DRAIN_MS);
      t.unref();
      sock.once('close', () => clearTimeout(t));
      req.once('end', () => clearTimeout(t));
      if (declared !== undefined && declared > limit + OVER_LIMIT_DRAIN_BYTES) res.once('finish', () => sock.destroy());
      req.removeAllListeners('data');
      let drained = 0;
      req.on('data', (d: Buffer) => {
        drained += d.length;
        if (drained > OVER_LIMIT_DRAIN_BYTES) sock.destroy();
      });
      req.resume();
      send(res, json(413, { status: 'error', message: `request body is over ${limit} bytes` }));
    };
    const dispatch = (s: Session, r: Req) => {
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
                episode.guest({ path, method, status: e instanceof HttpError ? e.status : 500, at, ms: performance.now() - t0, body: r.body });
                throw e;
              },
            )
        : () => h(ctx, s, r, rec);
      (QUEUED.has(path) ? ctx.fair.run(s.id, run) : ctx.fair.bounded(s.id, run))
        .then(
          (r) => send(res, r),
          (e) => {
            if (e instanceof DrumsError && e.code === 'rate_limited') {
              const r = json(429, { status: 'error', code: e.code, message: e.message });
              return send(res, { ...r, headers: { 'retry-after': String(FAIR_RETRY_AFTER_S) } });
            }
            if (e instanceof HttpError) {
              return send(res, e.status === 400 && typeof e.body === 'string' ? flaskPage(400, 'Bad Request', e.body) : json(e.status, e.body));
            }
            log('warn', 'osworld route failed', { path, id: s.id, error: errorMessage(e) });
            send(res, json(500, { status: 'error', message: errorMessage(e) }));
          },
        )
        // What a streamed handler did not read (it answered early) is read and discarded, within the limit.
        .finally(() => body?.resume())
        .catch(() => {});
    };
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) tooBig(declared);
    let size = 0;
    if (!refused) {
      req.on('data', (d: Buffer) => {
        size += d.length;
        if (size > limit) return tooBig();
        if (!body) chunks.push(d);
        else if (!body.write(d)) req.pause();
      });
      body?.on('drain', () => req.resume());
    }
    req.on('error', () => ac.abort());
    if (body) {
      // Streamed: the handler starts now and reads the body as it comes.
      req.on('end', () => {
        if (!refused) body.end();
      });
      if (refused) return;
      const s = ctx.session();
      if (!s) {
        body.resume();
        return send(res, json(503, { status: 'error', message: 'the session is gone' }));
      }
      return dispatch(s, { raw: req, body: Buffer.alloc(0), stream: body, signal: ac.signal });
    }
    req.on('end', () => {
      if (refused) return;
      const s = ctx.session();
      if (!s) return send(res, json(503, { status: 'error', message: 'the session is gone' }));
      dispatch(s, { raw: req, body: Buffer.concat(chunks), signal: ac.signal });
    });
  };
  return {
    handler,
    /** Stops a running recording (session destroy). */
    close() {
      rec.child?.kill('SIGKILL');
      rec.child = undefined;
    },
  };
}
