import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import WebSocket from 'ws';
import type {
  A11yTree,
  ActionsRequest,
  ActionsResponse,
  ClientCgroupResult,
  Episode,
  Outcome,
  EpisodeSummary,
  ExecRequest,
  ExecResult,
  ExecStreamRecord,
  FileList,
  FileStatResult,
  FileWritten,
  ForkRequest,
  ForkResult,
  Generation,
  HostReport,
  Pool,
  PoolClaim,
  PoolSpec,
  ReleaseRequest,
  ReleaseResult,
  ResetRequest,
  ScreenshotData,
  ScreenshotOptions,
  Session,
  SessionSpec,
  TakeoverView,
  TerminalText,
  WindowOpResult,
  WindowsView,
} from '../protocol/generated/types.ts';

import { ClientTimeoutError, DrumsApiError, NoDaemonError } from './errors.ts';
import { ERROR_CLASSES } from './generated/errors.ts';

/**
 * TypeScript client for the Drums HTTP API. Used by the CLI and the bench;
 * it never imports server code. Errors are DrumsApiError, as the subclass of
 * their code (generated/errors.ts: `stale_generation` → StaleGenerationError).
 */
export { ClientTimeoutError, DrumsApiError, NoDaemonError } from './errors.ts';
export * from './generated/errors.ts';

/**
 * Wire types come from the spec: protocol/openapi.yaml → scripts/gen-protocol.ts →
 * src/protocol/generated/types.ts. The client's older names are aliases of them.
 */
export type {
  A11yNode,
  Episode,
  EpisodeStep,
  EpisodeSummary,
  Outcome,
  A11yTree,
  Action,
  ActionResult,
  ActionsRequest,
  ActionsResponse,
  ExecRequest,
  ExecResult,
  ExecStreamRecord,
  FileList,
  FileStat,
  FileStatResult,
  FileWritten,
  ForkRequest,
  ForkResult,
  Generation,
  HostDisk,
  HostReport,
  OsworldEndpoint,
  Pool,
  PoolClaim,
  PoolSpec,
  ReleaseRequest,
  ReleaseResult,
  ResetRequest,
  ScreenshotData,
  ScreenshotOptions,
  Session,
  SessionSpec,
  SessionState,
  TerminalText,
  Window,
  WindowOpResult,
  WindowsView,
} from '../protocol/generated/types.ts';

const MIME: Record<string, string> = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp', raw: 'application/octet-stream' };
/** What actImage returns: the actions' results and the screenshot as bytes. */
export interface ActImageResponse extends Omit<ActResponse, 'screenshot'> {
  image?: { data: Buffer; mimeType: string; width: number; height: number; scaleX?: number; scaleY?: number };
}
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
/** A take-over held by this client: `id` is the capability its own input carries. */
export interface HeldTakeover extends TakeoverView {
  id: string;
  generation: Generation;
}
/** The last record of a streamed exec. */
export type ExecExit = Extract<ExecStreamRecord, { exitCode: number }>;
/** The query of GET /screenshot: the spec's screenshot options plus the expected generation. */
export type ScreenshotQuery = ScreenshotOptions & { generation?: Generation };

/** Rebuilds the typed error from the one error body `{error: {code, message, details}}`. */
async function apiError(res: Response): Promise<DrumsApiError> {
  let code = 'http_' + res.status,
    message = res.statusText,
    details: unknown;
  try {
    const j = (await res.json()) as { error?: { code: string; message: string; details?: unknown } };
    if (j.error) ({ code, message, details } = j.error);
  } catch {}
  const Cls = (ERROR_CLASSES as Record<string, typeof DrumsApiError>)[code] ?? DrumsApiError;
  return new Cls(res.status, code, message, details);
}

export interface DrumsClientOptions {
  /**
   * Per request, until the response is in (default 300 s, as the Python SDK's read timeout; 0 = none).
   * Streamed responses (exec with stream) are not cut by it.
   */
  timeoutMs?: number;
  /** Aborts every request of this client (e.g. at shutdown). */
  signal?: AbortSignal;
}

export const DEFAULT_REQUEST_TIMEOUT_MS = 300_000;

export class DrumsClient {
  readonly url: string;
  private readonly _token: string;
  private readonly _opts: DrumsClientOptions;
  constructor(url: string, token: string, opts: DrumsClientOptions = {}) {
    this.url = url.replace(/\/$/, '');
    this._token = token;
    this._opts = opts;
  }

  /** fetch with the client's timeout and signal; a timeout or abort is a ClientTimeoutError, no answer a NoDaemonError. */
  private async _fetch(path: string, init: RequestInit, o: { timeoutMs?: number } = {}): Promise<Response> {
    const timeoutMs = o.timeoutMs ?? this._opts.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    const signals = [...(timeoutMs > 0 ? [AbortSignal.timeout(timeoutMs)] : []), ...(this._opts.signal ? [this._opts.signal] : [])];
    try {
      const res = await fetch(this.url + path, { ...init, signal: signals.length ? AbortSignal.any(signals) : undefined });
      if (!res.ok) throw await apiError(res);
      return res;
    } catch (e) {
      if (e instanceof DrumsApiError) throw e;
      const name = (e as Error)?.name;
      if (name === 'TimeoutError' || name === 'AbortError') {
        throw new ClientTimeoutError(0, 'client_timeout', `${init.method} ${path}: no answer within ${timeoutMs} ms (or aborted)`, undefined, { cause: e });
      }
      const code = (e as { cause?: { code?: string } })?.cause?.code ?? '';
      if (code === 'ECONNREFUSED' || code === 'ENOENT')
        throw new NoDaemonError(0, 'no_daemon', `no daemon answers at ${this.url} (${code})`, undefined, { cause: e });
      throw e;
    }
  }

  /** DRUMS_URL + DRUMS_TOKEN, else the daemon record and token in the state dir. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): DrumsClient {
    if (env.DRUMS_URL) return new DrumsClient(env.DRUMS_URL, env.DRUMS_TOKEN ?? '');
    const stateDir = resolve(env.DRUMS_STATE_DIR || '/var/lib/drums');
    const rec = join(stateDir, 'daemon.json');
    if (!existsSync(rec))
      throw new NoDaemonError(0, 'no_daemon', `no daemon found for ${stateDir}: start one with 'drums serve', or set DRUMS_URL and DRUMS_TOKEN`);
    const { url } = JSON.parse(readFileSync(rec, 'utf8')) as { url: string };
    const token = env.DRUMS_TOKEN ?? readFileSync(join(stateDir, 'token'), 'utf8').trim();
    return new DrumsClient(url, token);
  }

  async request(method: string, path: string, body?: unknown, o: { timeoutMs?: number } = {}): Promise<Response> {
    return this._fetch(
      path,
      {
        method,
        headers: { authorization: `Bearer ${this._token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
      },
      o,
    );
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

  /**
   * POST /v1/host/client-cgroup: moves process `pid` (default: this one), a process of the caller's own
   * uid on the daemon's host, into the instance's client CPU cgroup (the daemon's weight; docs/api-host.md).
   */
  joinClientCgroup(pid: number = process.pid): Promise<ClientCgroupResult> {
    return this.json('POST', '/v1/host/client-cgroup', { pid });
  }

  createSession(spec: SessionSpec = {}): Promise<SessionInfo> {
    return this.json('POST', '/v1/sessions', spec);
  }
  /** A session from a warm pool (`x-drums-pool` says hit or miss); `onEmpty: 'fail'` gets 429 pool_empty at once. */
  async claimSession(claim: PoolClaim): Promise<SessionInfo & { poolHit: boolean }> {
    const res = await this.request('POST', '/v1/sessions', claim);
    return { ...((await res.json()) as SessionInfo), poolHit: /; hit$/.test(res.headers.get('x-drums-pool') ?? '') };
  }
  /** N copies of a ready session (`mode: 'disk'`: files copied, apps restarted); all or nothing. */
  forkSession(id: string, body: ForkRequest = {}): Promise<ForkResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/fork`, body);
  }
  /** Gives a claimed session back: `reset` into its pool (default) or `destroy`. */
  releaseSession(id: string, body: ReleaseRequest = {}): Promise<ReleaseResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/release`, body);
  }
  async listPools(): Promise<Pool[]> {
    return (await this.json<{ pools: Pool[] }>('GET', '/v1/pools')).pools;
  }
  getPool(name: string): Promise<Pool> {
    return this.json('GET', `/v1/pools/${encodeURIComponent(name)}`);
  }
  putPool(name: string, spec: PoolSpec): Promise<Pool> {
    return this.json('PUT', `/v1/pools/${encodeURIComponent(name)}`, spec);
  }
  async deletePool(name: string): Promise<void> {
    await this.request('DELETE', `/v1/pools/${encodeURIComponent(name)}`);
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
  /** A session's recorded episodes (spec `record`; docs/episodes.md), also after it was destroyed. */
  async listEpisodes(id: string): Promise<EpisodeSummary[]> {
    return (await this.json<{ episodes: EpisodeSummary[] }>('GET', `/v1/sessions/${encodeURIComponent(id)}/episodes`)).episodes;
  }
  /** One episode: a page of its events (`from`, `limit`), and with `steps` the episode as steps. */
  getEpisode(id: string, generation: number, o: { from?: number; limit?: number; steps?: boolean } = {}): Promise<Episode> {
    const q = new URLSearchParams();
    if (o.from !== undefined) q.set('from', String(o.from));
    if (o.limit !== undefined) q.set('limit', String(o.limit));
    if (o.steps) q.set('steps', '1');
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/episodes/${generation}${q.size ? `?${q}` : ''}`);
  }
  /** A frame or tree file an episode kept (named in its events and steps). */
  async episodeFile(id: string, generation: number, name: string): Promise<Buffer> {
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/episodes/${generation}/files/${encodeURIComponent(name)}`);
    return Buffer.from(await res.arrayBuffer());
  }
  /** Attaches a reward and/or outcome to an attempt (a later one replaces it). */
  setEpisodeOutcome(id: string, generation: number, outcome: Outcome): Promise<EpisodeSummary> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/episodes/${generation}/outcome`, outcome);
  }
  /** Every episode of the instance, newest first; `outcome` filters (failure, success, unscored, or a word). */
  listAllEpisodes(o: { outcome?: string; limit?: number } = {}): Promise<{ episodes: EpisodeSummary[]; bytes: number; maxBytes: number }> {
    const q = new URLSearchParams();
    if (o.outcome) q.set('outcome', o.outcome);
    if (o.limit !== undefined) q.set('limit', String(o.limit));
    return this.json('GET', `/v1/episodes${q.size ? `?${q}` : ''}`);
  }
  /** Deletes a closed episode (409 episode_open while it records). */
  async deleteEpisode(id: string, generation: number): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}/episodes/${generation}`);
  }
  async destroySession(id: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  /** Takes the session's input over (409 takeover_held if someone holds it; docs/dashboard.md). */
  takeOver(id: string, holder?: string): Promise<HeldTakeover> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/takeover`, holder === undefined ? {} : { holder });
  }
  /** Who holds the session's take-over, if anyone (also in every session view as `takeover`). */
  async getTakeover(id: string): Promise<TakeoverView | null> {
    return (await this.json<{ takeover: TakeoverView | null }>('GET', `/v1/sessions/${encodeURIComponent(id)}/takeover`)).takeover;
  }
  /** Releases the take-over: `takeoverId` must then be the held one (else 409); without, any. */
  async releaseTakeover(id: string, takeoverId?: string): Promise<void> {
    const q = takeoverId === undefined ? '' : `?takeover=${encodeURIComponent(takeoverId)}`;
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}/takeover${q}`);
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
    return this._fetch(path, {
      method,
      headers: { authorization: `Bearer ${this._token}`, ...(body !== undefined ? { 'content-type': 'application/octet-stream' } : {}) },
      body: body === undefined ? undefined : new Uint8Array(body),
    });
  }
  /** Screenshot with options; returns the bytes and the geometry headers. */
  async screenshotEx(
    id: string,
    o: ScreenshotQuery = {},
  ): Promise<{ data: Buffer; width: number; height: number; generation: number; mimeType: string; scaleX?: number; scaleY?: number; serverMs?: number }> {
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
      width: Number(h.get('x-drums-width')),
      height: Number(h.get('x-drums-height')),
      generation: Number(h.get('x-drums-generation')),
      mimeType: h.get('content-type') ?? '',
      ...(sx ? { scaleX: Number(sx), scaleY: Number(h.get('x-drums-scale-y')) } : {}),
      ...(st ? { serverMs: Number(st[1]) } : {}),
    };
  }
  /** A WebSocket to one of the daemon's socket routes (frame stream, VNC), authenticated. */
  webSocket(path: string, protocol = 'drums'): WebSocket {
    return new WebSocket(this.url.replace(/^http/, 'ws') + path, [protocol], { headers: { authorization: `Bearer ${this._token}` } });
  }
  /** Runs a batch of actions (validated whole first); optionally returns a screenshot taken after it. */
  act(id: string, req: ActRequest): Promise<ActResponse> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/actions`, req);
  }
  /**
   * Like act, but the screenshot comes back as bytes: asks for the binary response (image body,
   * JSON in the x-drums-actions header) and accepts the JSON one too (a daemon without it, or a
   * batch whose results do not fit in a header), decoding its base64.
   */
  async actImage(id: string, req: ActRequest): Promise<ActImageResponse> {
    const fmt = (req.screenshot && typeof req.screenshot === 'object' ? req.screenshot.format : undefined) ?? 'png';
    const res = await fetch(this.url + `/v1/sessions/${encodeURIComponent(id)}/actions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this._token}`, 'content-type': 'application/json', accept: `${MIME[fmt] ?? 'image/png'}, application/json` },
      body: JSON.stringify(req),
    });
    if (!res.ok) throw await apiError(res);
    const meta = res.headers.get('x-drums-actions');
    if (meta !== null) {
      const h = res.headers;
      const sx = h.get('x-drums-scale-x');
      const j = JSON.parse(meta) as Omit<ActResponse, 'screenshot'>;
      return {
        ...j,
        image: {
          data: Buffer.from(await res.arrayBuffer()),
          mimeType: h.get('content-type') ?? '',
          width: Number(h.get('x-drums-width')),
          height: Number(h.get('x-drums-height')),
          ...(sx ? { scaleX: Number(sx), scaleY: Number(h.get('x-drums-scale-y')) } : {}),
        },
      };
    }
    const j = (await res.json()) as ActResponse;
    const { screenshot, ...rest } = j;
    if (!screenshot) return rest;
    const { data, ...geom } = screenshot;
    return {
      ...rest,
      image: {
        data: Buffer.from(data, 'base64'),
        mimeType: geom.mimeType,
        width: geom.width,
        height: geom.height,
        ...(geom.scaleX !== undefined ? { scaleX: geom.scaleX, scaleY: geom.scaleY } : {}),
      },
    };
  }
  async a11y(
    id: string,
    o: { format?: 'xml' | 'json'; maxDepth?: number; maxWidth?: number; reference?: boolean; mirror?: boolean } = {},
  ): Promise<string | A11yTree> {
    const q = new URLSearchParams({ format: o.format ?? 'xml' });
    if (o.reference) q.set('reference', 'true');
    if (o.mirror === false) q.set('mirror', 'false');
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
  async execStream(id: string, req: ExecRequest, onData: (stream: 'stdout' | 'stderr', data: string) => void): Promise<ExecExit> {
    // The output streams for as long as the command runs: the server's own timeoutMs bounds it, not the client's.
    const res = await this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/exec?stream=1`, req, { timeoutMs: 0 });
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
    if (!last || last.error)
      throw new DrumsApiError(500, 'internal', `exec stream ended without an exit record${last?.error ? ': ' + JSON.stringify(last.error) : ''}`);
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
    const res = await this.requestRaw(
      'PUT',
      `/v1/sessions/${encodeURIComponent(id)}/files?${this._fileQ(path, { root: o.root ? '1' : undefined, mode: o.mode })}`,
      body,
    );
    return (await res.json()) as FileWritten;
  }
  async deleteFile(id: string, path: string, o: { root?: boolean; recursive?: boolean } = {}): Promise<void> {
    await this.request(
      'DELETE',
      `/v1/sessions/${encodeURIComponent(id)}/files?${this._fileQ(path, { root: o.root ? '1' : undefined, recursive: o.recursive ? '1' : undefined })}`,
    );
  }
  async listFiles(id: string, path: string, o: { root?: boolean } = {}): Promise<FileList> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}/files/list?${this._fileQ(path, { root: o.root ? '1' : undefined })}`);
  }
  async statFile(id: string, path: string, o: { root?: boolean; follow?: boolean } = {}): Promise<FileStatResult> {
    return this.json(
      'GET',
      `/v1/sessions/${encodeURIComponent(id)}/files/stat?${this._fileQ(path, { root: o.root ? '1' : undefined, follow: o.follow ? '1' : undefined })}`,
    );
  }
}
