import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

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

export interface SessionInfo {
  id: string;
  state: string;
  image: string;
  url: string | null;
  screen: { width: number; height: number; depth: number };
  generation: number;
  attempt: { generation: number; token: string };
  network: { address: string; gateway: string; egress: boolean; hostPorts: number[] };
  timings: Record<string, number>;
  brokenReason?: string;
  [k: string]: unknown;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
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
    if (!res.ok) {
      let code = 'http_' + res.status, message = res.statusText, details: unknown;
      try {
        const j = (await res.json()) as { error?: { code: string; message: string; details?: unknown } };
        if (j.error) ({ code, message, details } = j.error);
      } catch {}
      throw new DrumsApiError(res.status, code, message, details);
    }
    return res;
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await (await this.request(method, path, body)).json()) as T;
  }

  createSession(spec: Record<string, unknown> = {}): Promise<SessionInfo> {
    return this.json('POST', '/v1/sessions', spec);
  }
  async listSessions(): Promise<SessionInfo[]> {
    return (await this.json<{ sessions: SessionInfo[] }>('GET', '/v1/sessions')).sessions;
  }
  getSession(id: string): Promise<SessionInfo> {
    return this.json('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  resetSession(id: string): Promise<SessionInfo> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/reset`, {});
  }
  async destroySession(id: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  exec(id: string, req: { argv?: string[]; shell?: string; root?: boolean; cwd?: string; env?: Record<string, string>; stdin?: string; timeoutMs?: number }): Promise<ExecResult> {
    return this.json('POST', `/v1/sessions/${encodeURIComponent(id)}/exec`, req);
  }
  async screenshot(id: string, format = 'png'): Promise<Buffer> {
    const res = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/screenshot?format=${encodeURIComponent(format)}`);
    return Buffer.from(await res.arrayBuffer());
  }
}
