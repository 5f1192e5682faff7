// What every guest route gets (app.ts serves them): the context, the request, the reply shapes,
// Flask-shaped error pages and body parsing. Nothing here touches a socket.

import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { HTTPException } from 'hono/http-exception';
import type { DisplayService } from '../session/display-service.ts';
import type { FairScheduler } from '../policy/fair-share.ts';
import type { Session, SessionManager } from '../session/manager.ts';

export interface GuestContext {
  mgr: SessionManager;
  display: DisplayService;
  /** The daemon's fair share between sessions, the same as the API's. */
  fair: FairScheduler;
  /** The session, or undefined once it is gone. */
  session(): Session | undefined;
}

export interface Req {
  /** The route's path (no query). */
  path: string;
  /** The request's headers, names in lower case. */
  headers: Record<string, string>;
  /** The whole body (empty on a streamed route). */
  body: Buffer;
  /** A streamed route's body (app.ts STREAMED), within the body limit; the handler must read it. */
  stream?: Readable;
  /** Aborted when the client goes away before the response. */
  signal: AbortSignal;
}

/** A reply; a Readable body is streamed (app.ts toResponse). */
export type Reply = { status: number; body: unknown; type?: string; headers?: Record<string, string> };
export type Handler = (ctx: GuestContext, s: Session, req: Req, rec: RecordingState) => Promise<Reply>;

export const json = (status: number, body: unknown): Reply => ({ status, body, type: 'application/json' });
export const text = (status: number, body: string): Reply => ({ status, body, type: 'text/html; charset=utf-8' });

export function flaskPage(status: number, title: string, description: string): Reply {
  return text(status, `<!doctype html>\n<html lang=en>\n<title>${status} ${title}</title>\n<h1>${title}</h1>\n<p>${description}</p>\n`);
}

/**
 * A refusal for a request a web page could have sent, or undefined. The listener is on 127.0.0.1, but a browser
 * on the host reaches it too: a page whose name is rebound to 127.0.0.1 sends its own name as Host (DNS
 * rebinding), and a cross-origin request (a form POST needs no preflight) carries a foreign Origin. OSWorld's
 * own client (requests) sends `Host: 127.0.0.1:PORT` or `localhost:PORT` and no Origin. So: Host must name
 * 127.0.0.1 or localhost (with this listener's port, if it names one), and an Origin, if sent, must be this
 * listener's own (`http://127.0.0.1:PORT` or `http://localhost:PORT`).
 */
export function foreignRequest(h: { host: string | undefined; origin: string | undefined; port: number | undefined }): Reply | undefined {
  const port = h.port;
  const host = (h.host ?? '').toLowerCase();
  const own = (x: string) => x === `127.0.0.1:${port}` || x === `localhost:${port}`;
  if (!port || !(own(host) || host === '127.0.0.1' || host === 'localhost')) {
    return json(403, {
      status: 'error',
      code: 'forbidden_host',
      message: `Host '${host.slice(0, 100)}' is not allowed; use 127.0.0.1:${port} or localhost:${port}`,
    });
  }
  const origin = h.origin?.toLowerCase();
  if (origin !== undefined && !(origin.startsWith('http://') && own(origin.slice(7)))) {
    return json(403, { status: 'error', code: 'forbidden_origin', message: 'requests from web pages are refused (a foreign Origin header was sent)' });
  }
  return undefined;
}

export function parseJson(req: Req): Record<string, unknown> {
  const t = req.body.toString('utf8');
  if (!t.trim()) return {};
  try {
    const v = JSON.parse(t);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    /* below */
  }
  // Flask's request.json on a malformed body: 400 Bad Request page (app.ts).
  throw new HTTPException(400, { message: 'Failed to decode JSON object' });
}

export async function parseForm(req: Req): Promise<FormData> {
  const ct = req.headers['content-type'] ?? '';
  if (!/multipart\/form-data|application\/x-www-form-urlencoded/i.test(ct)) return new FormData();
  try {
    return await new Request('http://guest/', { method: 'POST', headers: { 'content-type': ct }, body: new Uint8Array(req.body) }).formData();
  } catch {
    return new FormData();
  }
}

export function ensureReady(s: Session): void {
  if (s.state !== 'ready') throw new Error(`session ${s.id} is ${s.state}${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
}

/** The desktop user's environment for ~ and $VAR expansion. */
export function userEnv(ctx: GuestContext): Record<string, string> {
  return ctx.mgr.sessionEnv();
}

export function pyTruthy(v: unknown): boolean {
  return !(v === undefined || v === null || v === false || v === 0 || v === '' || (Array.isArray(v) && v.length === 0));
}

export interface RecordingState {
  child?: ChildProcess;
  generation?: number;
  stderr?: string;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((r) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      r();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
