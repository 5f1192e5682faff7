import http from 'node:http';

/**
 * Black-box conformance checks of the Drums HTTP API. They use only HTTP
 * (node:http, so Host and chunked bodies can be controlled) and clean up
 * every session they create. Checks run in order; some share state through
 * `Run` (the session made by the create check).
 */
export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  json(): any;
  text(): string;
}

export interface RequestOptions {
  method?: string;
  body?: unknown;
  raw?: string | Buffer;
  headers?: Record<string, string>;
  token?: string | null;
  chunked?: boolean;
  /** Read at most this long (SSE). */
  readMs?: number;
}

export class Api {
  readonly url: URL;
  readonly token: string;
  constructor(url: string, token: string) {
    this.url = new URL(url);
    this.token = token;
  }

  request(path: string, o: RequestOptions = {}): Promise<Reply> {
    const payload = o.raw !== undefined ? Buffer.from(o.raw) : o.body !== undefined ? Buffer.from(JSON.stringify(o.body)) : undefined;
    const headers: Record<string, string> = { ...(payload && o.raw === undefined ? { 'content-type': 'application/json' } : {}), ...o.headers };
    const token = o.token === undefined ? this.token : o.token;
    if (token !== null && !('authorization' in headers)) headers.authorization = `Bearer ${token}`;
    if (payload && !o.chunked) headers['content-length'] = String(payload.length);
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: this.url.hostname, port: this.url.port, path, method: o.method ?? 'GET', headers, agent: false, setHost: !('host' in headers) },
        (res) => {
          const chunks: Buffer[] = [];
          let timer: NodeJS.Timeout | undefined;
          const finish = () => {
            clearTimeout(timer);
            const body = Buffer.concat(chunks);
            resolve({ status: res.statusCode!, headers: res.headers, body, json: () => JSON.parse(body.toString('utf8')), text: () => body.toString('utf8') });
            req.destroy();
          };
          if (o.readMs)
            timer = setTimeout(() => {
              res.destroy();
              finish();
            }, o.readMs);
          res.on('data', (d: Buffer) => chunks.push(d));
          res.on('end', finish);
          res.on('error', () => {
            if (!o.readMs) reject(new Error('response aborted'));
          });
        },
      );
      req.setTimeout(120_000, () => req.destroy(new Error(`no answer in 120 s: ${o.method ?? 'GET'} ${path}`)));
      // A server that refuses a big body may answer and close while we still write (EPIPE):
      // the answer counts; an error with no answer within a second fails the request.
      let answered = false;
      req.on('response', () => {
        answered = true;
      });
      req.on('error', (e) => {
        setTimeout(() => {
          if (!answered) reject(e);
        }, 1000);
      });
      if (payload && payload.length > 1 << 20) {
        // Big bodies go in pieces (chunked, unless a length was set), and stop once the
        // server answered: a server that refuses a body answers before reading it.
        (async () => {
          for (let i = 0; i < payload.length && !answered; i += 1 << 20) {
            if (!req.write(payload.subarray(i, i + (1 << 20))))
              await new Promise((r) => {
                req.once('drain', r);
                req.once('response', r);
                req.once('error', r);
              });
            await new Promise((r) => setImmediate(r));
          }
          if (!answered) req.end();
        })().catch(() => {});
      } else req.end(payload);
    });
  }
}

export class CheckFailed extends Error {}
export function expect(cond: unknown, msg: string): asserts cond {
  if (!cond) throw new CheckFailed(msg);
}

/** The status, the one error body shape, the code, and (if given) details.field. */
export function expectError(r: Reply, status: number | number[], code?: string, field?: string): void {
  const statuses = Array.isArray(status) ? status : [status];
  let j: any;
  try {
    j = r.json();
  } catch {
    throw new CheckFailed(`${r.status}: body is not JSON: ${r.text().slice(0, 120)}`);
  }
  expect(statuses.includes(r.status), `status ${r.status} (${j?.error?.code}), want ${statuses.join('/')}`);
  expect(
    j && typeof j === 'object' && Object.keys(j).length === 1 && j.error && typeof j.error === 'object',
    `error body is not {"error":{...}}: ${r.text().slice(0, 120)}`,
  );
  expect(typeof j.error.code === 'string' && /^[a-z][a-z0-9_]*$/.test(j.error.code), `error.code is not lower_snake: ${j.error.code}`);
  expect(typeof j.error.message === 'string' && j.error.message.length > 0, 'error.message is missing');
  expect(
    Object.keys(j.error).every((k) => ['code', 'message', 'details'].includes(k)),
    `error has other keys: ${Object.keys(j.error)}`,
  );
  if (code) expect(j.error.code === code, `code ${j.error.code}, want ${code}`);
  if (field) expect(j.error.details?.field === field, `details.field ${JSON.stringify(j.error.details?.field)}, want ${field}`);
}

export interface Run {
  api: Api;
  image: string;
  /** Sessions to destroy at the end, whatever happens. */
  created: Set<string>;
  session?: { id: string; generation: number; token: string };
}

export interface Check {
  area: string;
  name: string;
  /** Needs the session made by 'sessions: create'. */
  needsSession?: boolean;
  run(r: Run): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sid = (r: Run) => r.session!.id;

export const CHECKS: Check[] = [
  // ---- meta
  {
    area: 'meta',
    name: 'GET /healthz works without a token',
    async run({ api }) {
      const r = await api.request('/healthz', { token: null });
      expect(r.status === 200 && r.json().ok === true, `got ${r.status} ${r.text().slice(0, 80)}`);
    },
  },
  {
    area: 'meta',
    name: 'GET /openapi.json is an OpenAPI 3.1 document',
    async run({ api }) {
      const r = await api.request('/openapi.json', { token: null });
      expect(r.status === 200, `status ${r.status}`);
      const j = r.json();
      expect(/^3\.1\./.test(j.openapi), `openapi ${j.openapi}`);
      for (const p of ['/v1/sessions', '/v1/sessions/{id}', '/v1/sessions/{id}/reset', '/v1/sessions/{id}/events']) expect(j.paths?.[p], `no path ${p}`);
      expect(j['x-error-codes']?.stale_generation?.status === 409, 'x-error-codes lacks stale_generation → 409');
    },
  },
  {
    area: 'meta',
    name: 'GET /docs is self-contained HTML',
    async run({ api }) {
      const r = await api.request('/docs', { token: null });
      expect(r.status === 200 && String(r.headers['content-type']).startsWith('text/html'), `status ${r.status} ${r.headers['content-type']}`);
      const t = r.text();
      expect(t.includes('createSession') || t.includes('/v1/sessions'), 'docs do not mention /v1/sessions');
      expect(!/<(script|link|img)[^>]+(src|href)=["']?https?:/i.test(t), 'docs load an external resource');
    },
  },
  {
    area: 'meta',
    name: 'GET /metrics needs the token',
    async run({ api }) {
      expectError(await api.request('/metrics', { token: null }), 401, 'unauthorized');
    },
  },
  {
    area: 'meta',
    name: 'GET /metrics is Prometheus text',
    async run({ api }) {
      const r = await api.request('/metrics');
      expect(r.status === 200 && String(r.headers['content-type']).startsWith('text/plain'), `status ${r.status} ${r.headers['content-type']}`);
      expect(/^# TYPE drums_sessions gauge$/m.test(r.text()) && /^drums_sessions\{state="ready"\} \d+$/m.test(r.text()), 'no drums_sessions{state} gauge');
    },
  },
  // ---- auth, Host, Origin
  {
    area: 'auth',
    name: 'no token → 401 unauthorized',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { token: null }), 401, 'unauthorized');
    },
  },
  {
    area: 'auth',
    name: 'wrong token → 401',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { token: api.token + 'x' }), 401, 'unauthorized');
    },
  },
  {
    area: 'auth',
    name: 'token in another scheme → 401',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { headers: { authorization: `Basic ${api.token}` } }), 401, 'unauthorized');
    },
  },
  {
    area: 'auth',
    name: 'an Origin header → 403 forbidden_origin',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { headers: { origin: 'http://evil.example' } }), 403, 'forbidden_origin');
    },
  },
  {
    area: 'auth',
    name: 'Origin: null (sandboxed page) → 403',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: {}, headers: { origin: 'null' } }), 403, 'forbidden_origin');
    },
  },
  {
    area: 'auth',
    name: 'a same-host Origin is refused too',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { headers: { origin: api.url.origin } }), 403, 'forbidden_origin');
    },
  },
  {
    area: 'auth',
    name: 'foreign Host (DNS rebinding) → 403 forbidden_host',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { headers: { host: `evil.example:${api.url.port}` } }), 403, 'forbidden_host');
    },
  },
  {
    area: 'auth',
    name: 'foreign Host is refused before the token',
    async run({ api }) {
      expectError(await api.request('/healthz', { token: null, headers: { host: 'attacker.test' } }), 403, 'forbidden_host');
    },
  },
  // ---- routing
  {
    area: 'routing',
    name: 'unknown route → 404 not_found',
    async run({ api }) {
      expectError(await api.request('/v1/nothing-here'), 404, 'not_found');
    },
  },
  {
    area: 'routing',
    name: 'PUT /v1/sessions → 405 with Allow',
    async run({ api }) {
      const r = await api.request('/v1/sessions', { method: 'PUT', body: {} });
      expectError(r, 405, 'method_not_allowed');
      expect(String(r.headers.allow).includes('POST'), `Allow: ${r.headers.allow}`);
    },
  },
  {
    area: 'routing',
    name: 'PATCH /v1/sessions/{id} → 405',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/s0123456789', { method: 'PATCH', body: {} }), 405, 'method_not_allowed');
    },
  },
  {
    area: 'routing',
    name: 'GET /v1/sessions/{id}/reset → 405',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/s0123456789/reset'), 405, 'method_not_allowed');
    },
  },
  {
    area: 'routing',
    name: 'encoded path traversal in an id → 4xx',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/..%2F..%2Fetc%2Fpasswd'), [400, 404]);
    },
  },
  {
    area: 'routing',
    name: 'raw ../ traversal → 4xx',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/../../etc/passwd'), [400, 404]);
    },
  },
  {
    area: 'routing',
    name: 'Unicode id → 404 session_not_found',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/s%C3%A9%E2%80%AE0123'), 404, 'session_not_found');
    },
  },
  {
    area: 'routing',
    name: 'NUL in an id → 4xx',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/s%000123456789'), [400, 404]);
    },
  },
  {
    area: 'routing',
    name: 'a 4 KiB id → 4xx, no 5xx',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/' + 's'.repeat(4096)), [400, 404, 414]);
    },
  },
  {
    area: 'routing',
    name: 'well-formed unknown id → 404 session_not_found',
    async run({ api }) {
      expectError(await api.request('/v1/sessions/s0000000000'), 404, 'session_not_found');
    },
  },
  // ---- validation
  {
    area: 'validation',
    name: 'invalid JSON → 400 invalid_json',
    async run({ api }) {
      expectError(
        await api.request('/v1/sessions', { method: 'POST', raw: '{"image": ', headers: { 'content-type': 'application/json' } }),
        400,
        'invalid_json',
      );
    },
  },
  {
    area: 'validation',
    name: 'a JSON array body → 400 naming body',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: [1] }), 400, 'invalid_spec', 'body');
    },
  },
  {
    area: 'validation',
    name: 'unknown spec field → 400 naming it',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { image: 'minimal', bogus: 1 } }), 400, 'invalid_spec', 'bogus');
    },
  },
  {
    area: 'validation',
    name: 'screen 0x0 → 400 naming screen.width',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { screen: '0x0' } }), 400, 'invalid_spec', 'screen.width');
    },
  },
  {
    area: 'validation',
    name: 'memoryMb as a string → 400 naming memoryMb',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { memoryMb: '512' } }), 400, 'invalid_spec', 'memoryMb');
    },
  },
  {
    area: 'validation',
    name: 'image ../../etc → 400 naming image',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { image: '../../etc' } }), 400, 'invalid_spec', 'image');
    },
  },
  {
    area: 'validation',
    name: 'javascript: URL → 400 naming url',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { url: 'javascript:alert(1)' } }), 400, 'invalid_spec', 'url');
    },
  },
  {
    area: 'validation',
    name: 'negative ttlSeconds → 400 naming ttlSeconds',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { ttlSeconds: -1 } }), 400, 'invalid_spec', 'ttlSeconds');
    },
  },
  {
    area: 'validation',
    name: 'unknown image → 404 image_not_found, nothing made',
    async run({ api }) {
      expectError(await api.request('/v1/sessions', { method: 'POST', body: { image: 'no-such-image-x' } }), 404, 'image_not_found');
    },
  },
  {
    area: 'validation',
    name: 'body over the limit → 413',
    async run({ api }) {
      expectError(
        await api.request('/v1/sessions', { method: 'POST', raw: 'x'.repeat(9 * 1024 * 1024), headers: { 'content-type': 'application/json' } }),
        413,
        'payload_too_large',
      );
    },
  },
  {
    area: 'validation',
    name: 'chunked body over the limit → 413',
    async run({ api }) {
      expectError(
        await api.request('/v1/sessions', { method: 'POST', raw: 'x'.repeat(9 * 1024 * 1024), chunked: true, headers: { 'content-type': 'application/json' } }),
        413,
        'payload_too_large',
      );
    },
  },
  {
    area: 'validation',
    name: 'bad Idempotency-Key → 400 naming it',
    async run({ api }) {
      expectError(
        await api.request('/v1/sessions', { method: 'POST', body: {}, headers: { 'idempotency-key': 'k'.repeat(300) } }),
        400,
        'invalid_request',
        'Idempotency-Key',
      );
    },
  },
  {
    area: 'validation',
    name: '26 malformed bodies: only 4xx, never 5xx',
    async run(run) {
      const { api } = run;
      const cases: [string, RequestOptions][] = [];
      // Every one of these is invalid (an empty body or null would be a valid default create).
      const junk = [
        '{',
        '[]',
        '"x"',
        '1e999',
        '{"image":7}',
        '{"screen":{}}',
        '{"labels":[]}',
        '{"hostPorts":[0]}',
        '{"browserFlags":["x"]}',
        '{"cpus":"NaN"}',
        '{"__proto__":{"x":1}}',
        '{"labels":{"a":{"b":1}}}',
        '\u0000',
      ];
      for (const j of junk) cases.push(['/v1/sessions', { method: 'POST', raw: j, headers: { 'content-type': 'application/json' } }]);
      for (const j of junk) cases.push(['/v1/sessions/s0123456789/exec', { method: 'POST', raw: j, headers: { 'content-type': 'application/json' } }]);
      for (const [p, o] of cases) {
        const r = await api.request(p, o);
        if (r.status < 300)
          try {
            const id = r.json().id;
            if (typeof id === 'string') run.created.add(id);
          } catch {}
        expect(r.status >= 400 && r.status < 500, `${o.method} ${p} ${JSON.stringify(o.raw)} → ${r.status}`);
        expectError(r, r.status);
      }
    },
  },
  // ---- sessions (one session, image from --image)
  {
    area: 'sessions',
    name: 'create → 201, generation 1, x-drums-generation',
    async run(run) {
      const key = `conf-${process.pid}-${Date.now()}`;
      const r = await run.api.request('/v1/sessions', {
        method: 'POST',
        body: { image: run.image, labels: { 'drums.conformance': '1' } },
        headers: { 'idempotency-key': key },
      });
      if (r.status === 201) run.created.add(r.json().id);
      expect(r.status === 201, `status ${r.status} ${r.text().slice(0, 200)}`);
      const s = r.json();
      expect(/^s[0-9a-f]{10}$/.test(s.id) && s.state === 'ready', `id ${s.id} state ${s.state}`);
      expect(s.generation === 1 && s.attempt?.generation === 1 && /^[0-9a-f-]{36}$/.test(s.attempt?.token), `attempt ${JSON.stringify(s.attempt)}`);
      expect(r.headers['x-drums-generation'] === '1', `x-drums-generation ${r.headers['x-drums-generation']}`);
      run.session = { id: s.id, generation: 1, token: s.attempt.token };
      (run as Run & { key?: string }).key = key;
    },
  },
  {
    area: 'sessions',
    name: 'idempotent retry → same session, nothing new',
    needsSession: true,
    async run(run) {
      const key = (run as Run & { key?: string }).key!;
      const r = await run.api.request('/v1/sessions', {
        method: 'POST',
        body: { labels: { 'drums.conformance': '1' }, image: run.image },
        headers: { 'idempotency-key': key },
      });
      expect(r.status === 200 || r.status === 201, `status ${r.status} ${r.text().slice(0, 200)}`);
      if (r.json().id !== sid(run)) run.created.add(r.json().id);
      expect(r.json().id === sid(run), `retry made ${r.json().id}, first was ${sid(run)}`);
      const list = (await run.api.request('/v1/sessions')).json().sessions as { id: string; labels: Record<string, string> }[];
      expect(list.filter((s) => s.labels['drums.conformance'] === '1').length === 1, `${list.length} conformance sessions exist`);
    },
  },
  {
    area: 'sessions',
    name: 'same key, other body → 409 idempotency_conflict',
    needsSession: true,
    async run(run) {
      const key = (run as Run & { key?: string }).key!;
      const r = await run.api.request('/v1/sessions', { method: 'POST', body: { image: run.image, screen: '800x600' }, headers: { 'idempotency-key': key } });
      if (r.status < 300) run.created.add(r.json().id);
      expectError(r, 409, 'idempotency_conflict');
    },
  },
  {
    area: 'sessions',
    name: 'GET session → 200 with x-drums-generation',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}`);
      expect(r.status === 200 && r.json().id === sid(run), `status ${r.status}`);
      expect(r.headers['x-drums-generation'] === '1', `x-drums-generation ${r.headers['x-drums-generation']}`);
    },
  },
  {
    area: 'sessions',
    name: 'GET /v1/sessions lists it',
    needsSession: true,
    async run(run) {
      const r = await run.api.request('/v1/sessions');
      expect(r.status === 200 && r.json().sessions.some((s: { id: string }) => s.id === sid(run)), 'not listed');
    },
  },
  {
    area: 'generation',
    name: 'stale ?generation → 409 stale_generation',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}?generation=99`);
      expectError(r, 409, 'stale_generation');
      expect(r.headers['x-drums-generation'] === '1', `x-drums-generation ${r.headers['x-drums-generation']} on the 409`);
    },
  },
  {
    area: 'generation',
    name: 'stale x-drums-generation header → 409',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/screenshot`, { headers: { 'x-drums-generation': '7' } }), 409, 'stale_generation');
    },
  },
  {
    area: 'generation',
    name: 'generation=abc → 400 naming generation',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}?generation=abc`), 400, 'invalid_request', 'generation');
    },
  },
  {
    area: 'observe',
    name: 'exec → exit code, output and generation',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}/exec?generation=1`, { method: 'POST', body: { shell: 'echo conf; exit 3' } });
      expect(r.status === 200, `status ${r.status} ${r.text().slice(0, 200)}`);
      const j = r.json();
      expect(j.exitCode === 3 && j.stdout === 'conf\n' && j.generation === 1, JSON.stringify(j).slice(0, 200));
    },
  },
  {
    area: 'observe',
    name: 'exec with argv and shell → 400 invalid_exec',
    needsSession: true,
    async run(run) {
      expectError(
        await run.api.request(`/v1/sessions/${sid(run)}/exec`, { method: 'POST', body: { argv: ['true'], shell: 'true' } }),
        400,
        'invalid_exec',
        'argv',
      );
    },
  },
  {
    area: 'observe',
    name: 'exec unknown field → 400 naming it',
    needsSession: true,
    async run(run) {
      expectError(
        await run.api.request(`/v1/sessions/${sid(run)}/exec`, { method: 'POST', body: { argv: ['true'], sudo: true } }),
        400,
        'invalid_exec',
        'sudo',
      );
    },
  },
  {
    area: 'observe',
    name: 'screenshot → a PNG of the screen size',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}/screenshot?format=png`);
      expect(r.status === 200 && r.headers['content-type'] === 'image/png', `status ${r.status} ${r.headers['content-type']}`);
      expect(r.body.subarray(1, 4).toString() === 'PNG', 'not a PNG');
      expect(Number(r.headers['x-drums-width']) > 0 && Number(r.headers['x-drums-height']) > 0, 'no x-drums-width/height');
      expect(r.headers['x-drums-generation'] === '1', `x-drums-generation ${r.headers['x-drums-generation']}`);
    },
  },
  {
    area: 'observe',
    name: 'screenshot format=gif → 400 invalid_format',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/screenshot?format=gif`), 400, 'invalid_format');
    },
  },
  {
    area: 'observe',
    name: 'events: first SSE event is the state',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}/events`, { readMs: 700 });
      expect(r.status === 200 && String(r.headers['content-type']).startsWith('text/event-stream'), `status ${r.status} ${r.headers['content-type']}`);
      const m = /event: state\ndata: (.*)\n/.exec(r.text());
      expect(m && JSON.parse(m[1]!).id === sid(run), `no state event: ${r.text().slice(0, 120)}`);
    },
  },
  {
    area: 'observe',
    name: 'events fps=99 → 400 naming fps',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/events?fps=99`), 400, 'invalid_request', 'fps');
    },
  },
  {
    area: 'generation',
    name: 'reset with a stale generation → 409, nothing reset',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/reset`, { method: 'POST', body: { generation: 5 } }), 409, 'stale_generation');
      expect((await run.api.request(`/v1/sessions/${sid(run)}`)).json().generation === 1, 'generation moved');
    },
  },
  {
    area: 'generation',
    name: 'reset with an unknown body field → 400',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/reset`, { method: 'POST', body: { wipe: true } }), 400, 'invalid_request', 'wipe');
    },
  },
  {
    area: 'generation',
    name: 'reset → generation 2, new attempt token',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}/reset`, { method: 'POST', body: { generation: 1 } });
      expect(r.status === 200, `status ${r.status} ${r.text().slice(0, 200)}`);
      const j = r.json();
      expect(j.generation === 2 && j.attempt.generation === 2 && j.attempt.token !== run.session!.token, JSON.stringify(j.attempt));
      expect(r.headers['x-drums-generation'] === '2', `x-drums-generation ${r.headers['x-drums-generation']}`);
      run.session!.generation = 2;
    },
  },
  {
    area: 'generation',
    name: 'the old generation is stale for exec',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}/exec?generation=1`, { method: 'POST', body: { argv: ['true'] } }), 409, 'stale_generation');
    },
  },
  {
    area: 'generation',
    name: 'delete with a stale generation → 409, still there',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}`, { method: 'DELETE', headers: { 'x-drums-generation': '1' } }), 409, 'stale_generation');
      expect((await run.api.request(`/v1/sessions/${sid(run)}`)).status === 200, 'session gone');
    },
  },
  {
    area: 'sessions',
    name: 'delete → 204, then GET → 404',
    needsSession: true,
    async run(run) {
      const r = await run.api.request(`/v1/sessions/${sid(run)}?generation=2`, { method: 'DELETE' });
      expect(r.status === 204, `status ${r.status} ${r.text().slice(0, 200)}`);
      run.created.delete(sid(run));
      expectError(await run.api.request(`/v1/sessions/${sid(run)}`), 404, 'session_not_found');
    },
  },
  {
    area: 'sessions',
    name: 'delete again → 404',
    needsSession: true,
    async run(run) {
      expectError(await run.api.request(`/v1/sessions/${sid(run)}`, { method: 'DELETE' }), 404, 'session_not_found');
    },
  },
  {
    area: 'meta',
    name: 'metrics count the create, reset and their latency',
    needsSession: true,
    async run({ api }) {
      const t = (await api.request('/metrics')).text();
      const v = (re: RegExp) => Number(re.exec(t)?.[1] ?? 0);
      expect(v(/^drums_session_creates_total (\d+)/m) >= 1, 'creates_total < 1');
      expect(v(/^drums_session_resets_total (\d+)/m) >= 1, 'resets_total < 1');
      expect(v(/^drums_op_duration_seconds_count\{op="create"\} (\d+)/m) >= 1, 'no create histogram');
      expect(v(/^drums_op_duration_seconds_count\{op="exec"\} (\d+)/m) >= 1, 'no exec histogram');
    },
  },
  {
    area: 'lifetime',
    name: 'ttlSeconds reaps; the id then answers 410 session_expired',
    async run(run) {
      const r = await run.api.request('/v1/sessions', { method: 'POST', body: { image: run.image, ttlSeconds: 1 } });
      expect(r.status === 201, `status ${r.status} ${r.text().slice(0, 200)}`);
      const id = r.json().id as string;
      run.created.add(id);
      let g: Reply | undefined;
      for (let i = 0; i < 60; i++) {
        await sleep(250);
        g = await run.api.request(`/v1/sessions/${id}`);
        if (g.status !== 200) break;
      }
      if (g!.status !== 200) run.created.delete(id);
      expectError(g!, 410, 'session_expired');
      expect(g!.json().error.details?.reason === 'ttl_expired', `details ${JSON.stringify(g!.json().error.details)}`);
      const t = (await run.api.request('/v1/terminations')).json().terminations as { id: string; reason: string }[];
      expect(
        t.some((x) => x.id === id && x.reason === 'ttl_expired'),
        'not in /v1/terminations',
      );
    },
  },
];
