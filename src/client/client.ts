import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type {
  A11yTree, ActionsRequest, ActionsResponse, ExecRequest, ExecResult, ExecStreamRecord, FileList, FileStatResult,
  FileWritten, Generation, HostReport, ResetRequest, ScreenshotData, ScreenshotOptions, Session, SessionSpec, TerminalText,
  WindowOpResult, WindowsView,
} from '../protocol/generated/types.ts';

/**
 * TypeScript client for the Drums HTTP API. Used by the CLI and the bench;
 * it never imports server code.
 */
export class DrumsApiError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details?: unknown;
  constructor(status: number, code: string, message: string, details?: unknown) {
    super(message);
    this.name = 'DrumsApiError';
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/**
 * Wire types come from the spec: protocol/openapi.yaml → scripts/gen-protocol.ts →
 * src/protocol/generated/types.ts. The client's older names are aliases of them.
 */
export type {
  A11yNode, A11yTree, Action, ActionResult, ActionsRequest, ActionsResponse, ExecRequest, ExecResult, ExecStreamRecord,
  FileList, FileStat, FileStatResult, FileWritten, Generation, HostDisk, HostReport, OsworldEndpoint, ResetRequest, ScreenshotData,
  ScreenshotOptions, Session, SessionSpec, SessionState, TerminalText, Window, WindowOpResult, WindowsView,
} from '../protocol/generated/types.ts';

/** A session as the API returns it. */
export type SessionInfo = Session;
/**
 * The body of POST /actions. `actions` is the spec's `Action[]`, typed loosely
 * (`Action` is open anyway) so raw batches, bad ones included, can be sent:
 * the server validates every action and names the failing field.
 */
export type ActRequest = Omit<ActionsRequest, 'actions'> & { actions: readonly unknown[] };
export type ActResponse = ActionsResponse;
export type ShotJson = ScreenshotData;
/** The last record of a streamed exec. */
export type ExecExit = Extract<ExecStreamRecord, { exitCode: number }>;
/** The query of GET /screenshot: the spec's screenshot options plus the expected generation. */
export type ScreenshotQuery = ScreenshotOptions & { generation?: Generation };

/** Rebuilds the typed error from the one error body `{error: {code, message, details}}`. */
async function apiError(res: Response): Promise<DrumsApiError> {
  let code = 'http_' + res.status, message = res.statusText, details: unknown;
  try {
    const j = (await res.json()) as { error?: { code: string; message: string; details?: unknown } };
    if (j.error) ({ code, message, details } = j.error);
  } catch {}
  return new DrumsApiError(res.status, code, message, details);
}

export class DrumsClient {
  readonly url: string;
  private readonly _token: string;
  constructor(url: string, token: string) {
    this.url = url.replace(/\/$/, '');
    this._token = token;
  }

  /** DRUMS_URL + DRUMS_TOKEN, else the daemon record and token in the state dir. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): DrumsClient {
    if (env.DRUMS_URL) return new DrumsClient(env.DRUMS_URL, env.DRUMS_TOKEN ?? '');
    const stateDir = resolve(env.DRUMS_STATE_DIR || '/var/lib/drums');
    const rec = join(stateDir, 'daemon.json');
    if (!existsSync(rec)) throw new Error(`no daemon found for ${stateDir}: start one with 'drums serve', or set DRUMS_URL and DRUMS_TOKEN`);
    const { url } = JSON.parse(readFileSync(rec, 'utf8')) as { url: string };
    const token = env.DRUMS_TOKEN ?? readFileSync(join(stateDir, 'token'), 'utf8').trim();
    return new DrumsClient(url, token);
  }

  async request(method: string, path: string, body?: unknown): Promise<Response> {
    const res = await fetch(this.url + path, {
      method,
      headers: { authorization: `Bearer ${this._token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw await apiError(res);
    return res;
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await (await this.request(method, path, body)).json()) as T;
  }

  /** GET /v1/host: capacity, load, images and identity of this host (for placement). */
  host(): Promise<HostReport> {
    return this.json('GET', '/v1/host');
  }

  /** POST /v1/host/drain: new creates get 503 host_draining; held sessions go on. */
  drainHost(): Promise<HostReport> {
    return this.json('POST', '/v1/host/drain');
  }

  /** DELETE /v1/host/drain: take new sessions again. */
  undrainHost(): Promise<HostReport> {
    return this.json('DELETE', '/v1/host/drain');
  }

  createSession(spec: SessionSpec = {}): Promise<SessionInfo> {
    return this.json('POST', '/v1/sessions', spec);
  }
  async listSessions(): Promise<SessionInfo[]> {
    return (await this.json<{ sessions: SessionInfo[] }>('GET', '/v1/sessions')).sessions;
  }
  getSession(id: string): Promise<SessionInfo> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  resetSession(id: string, body: ResetRequest = {}): Promise<SessionInfo> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/reset`, body);
  }
  async destroySession(id: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  exec(id: string, req: ExecRequest): Promise<ExecResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/exec`, req);
  }
  async screenshot(id: string, format = 'png'): Promise<Buffer> {
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/screenshot?format=${encodeURIComponent(format)}`);
    return Buffer.from(await res.arrayBuffer());
  }
  /** Raw request with a binary body (files). */
  async requestRaw(method: string, path: string, body?: Uint8Array): Promise<Response> {
    const res = await fetch(this.url + path, {
      method,
      headers: { authorization: `Bearer ${this._token}`, ...(body !== undefined ? { 'content-type': 'application/octet-stream' } : {}) },
      body: body === undefined ? undefined : new Uint8Array(body),
    });
    if (!res.ok) throw await apiError(res);
    return res;
  }
  /** Screenshot with options; returns the bytes and the geometry headers. */
  async screenshotEx(id: string, o: ScreenshotQuery = {}): Promise<{ data: Buffer; width: number; height: number; generation: number; mimeType: string; scaleX?: number; scaleY?: number; serverMs?: number }> {
    const q = new URLSearchParams();
    if (o.format) q.set('format', o.format);
    if (o.quality !== undefined) q.set('quality', String(o.quality));
    if (o.region) q.set('region', `${o.region.x},${o.region.y},${o.region.width},${o.region.height}`);
    if (o.scale) q.set('scale', `${o.scale.width}x${o.scale.height}`);
    if (o.cursor !== undefined) q.set('cursor', String(o.cursor));
    if (o.generation !== undefined) q.set('generation', String(o.generation));
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/screenshot?${q}`);
    const h = res.headers;
    const sx = h.get('x-drums-scale-x');
    const st = /capture;dur=([\d.]+)/.exec(h.get('server-timing') ?? '');
    return {
      data: Buffer.from(await res.arrayBuffer()),
      width: Number(h.get('x-drums-width')), height: Number(h.get('x-drums-height')), generation: Number(h.get('x-drums-generation')),
      mimeType: h.get('content-type') ?? '',
      ...(sx ? { scaleX: Number(sx), scaleY: Number(h.get('x-drums-scale-y')) } : {}),
      ...(st ? { serverMs: Number(st[1]) } : {}),
    };
  }
  /** Runs a batch of actions (validated whole first); optionally returns a screenshot taken after it. */
  act(id: string, req: ActRequest): Promise<ActResponse> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/actions`, req);
  }
  async a11y(id: string, o: { format?: 'xml' | 'json'; maxDepth?: number; maxWidth?: number } = {}): Promise<string | A11yTree> {
    const q = new URLSearchParams({ format: o.format ?? 'xml' });
    if (o.maxDepth) q.set('maxDepth', String(o.maxDepth));
    if (o.maxWidth) q.set('maxWidth', String(o.maxWidth));
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/a11y?${q}`);
    return o.format === 'json' ? ((await res.json()) as A11yTree) : res.text();
  }
  terminal(id: string): Promise<TerminalText> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/terminal`);
  }
  windows(id: string): Promise<WindowsView> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/windows`);
  }
  activateWindow(id: string, wid: number): Promise<WindowOpResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/windows/${wid}/activate`, {});
  }
  closeWindow(id: string, wid: number): Promise<WindowOpResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/windows/${wid}/close`, {});
  }
  /** Exec with streamed output: calls onData per chunk, resolves with the final record. */
  async execStream(id: string, req: ExecRequest,
    onData: (stream: 'stdout' | 'stderr', data: string) => void): Promise<ExecExit> {
    const res = await this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/exec?stream=1`, req);
    const dec = new TextDecoder();
    let buf = '';
    let last: Record<string, unknown> | undefined;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const rec = JSON.parse(buf.slice(0, nl)) as Record<string, unknown>;
        buf = buf.slice(nl + 1);
        if (typeof rec.stream === 'string') onData(rec.stream as 'stdout', rec.data as string);
        else last = rec;
      }
    }
    if (!last || last.error) throw new DrumsApiError(500, 'internal', `exec stream ended without an exit record${last?.error ? ': ' + JSON.stringify(last.error) : ''}`);
    return last as ExecExit;
  }
  private _fileQ(path: string, extra: Record<string, string | undefined> = {}): string {
    const q = new URLSearchParams({ path });
    for (const [k, v] of Object.entries(extra)) if (v !== undefined) q.set(k, v);
    return q.toString();
  }
  async readFile(id: string, path: string, o: { root?: boolean } = {}): Promise<Buffer> {
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/files?${this._fileQ(path, { root: o.root ? '1' : undefined })}`);
    return Buffer.from(await res.arrayBuffer());
  }
  async writeFile(id: string, path: string, data: Uint8Array | string, o: { root?: boolean; mode?: string } = {}): Promise<FileWritten> {
    const body = typeof data === 'string' ? Buffer.from(data) : data;
    const res = await this.requestRaw('PUT', `/v1/sessions/${encodeURIComponent(id)}/files?${this._fileQ(path, { root: o.root ? '1' : undefined, mode: o.mode })}`, body);
    return (await res.json()) as FileWritten;
  }
  async deleteFile(id: string, path: string, o: { root?: boolean; recursive?: boolean } = {}): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}/files?${this._fileQ(path, { root: o.root ? '1' : undefined, recursive: o.recursive ? '1' : undefined })}`);
  }
  async listFiles(id: string, path: string, o: { root?: boolean } = {}): Promise<FileList> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/files/list?${this._fileQ(path, { root: o.root ? '1' : undefined })}`);
  }
  async statFile(id: string, path: string, o: { root?: boolean; follow?: boolean } = {}): Promise<FileStatResult> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/files/stat?${this._fileQ(path, { root: o.root ? '1' : undefined, follow: o.follow ? '1' : undefined })}`);
  }
}
