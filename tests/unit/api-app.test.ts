// The API's middleware and session routes through Hono's app.request(): no socket, no root.
// The session manager is an in-memory stand-in (the real one needs root and an image); every
// response is checked against the spec's schema for its path, method and status.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createApp } from '../../src/api/app.ts';
import { specResponses } from '../../src/api/spec-validate.ts';
import { DisplayService } from '../../src/session/display-service.ts';
import type { SessionManager } from '../../src/session/manager.ts';
import { FakeManager } from './fakes.ts';

const TOKEN = 'unit-test-token';
const responses = specResponses();

function setup(opts: { maxBodyBytes?: number; perSecond?: number; burst?: number } = {}) {
  const mgr = new FakeManager();
  const app = createApp(mgr as unknown as SessionManager, new DisplayService(), {
    token: TOKEN,
    allowedHosts: ['127.0.0.1', 'localhost'],
    maxBodyBytes: opts.maxBodyBytes,
    rateLimit: { perSecond: opts.perSecond ?? 0, burst: opts.burst ?? 1 },
  });
  /** One request; asserts the response is what the spec allows, returns status, headers and JSON. */
  const call = async (method: string, path: string, o: { body?: unknown; raw?: string; headers?: Record<string, string>; token?: string | null } = {}) => {
    const headers: Record<string, string> = { host: '127.0.0.1:7450', ...o.headers };
    if (o.token !== null) headers.authorization = `Bearer ${o.token ?? TOKEN}`;
    if (o.body !== undefined || o.raw !== undefined) headers['content-type'] = 'application/json';
    const res = await app.request(path, { method, headers, body: o.raw ?? (o.body === undefined ? undefined : JSON.stringify(o.body)) });
    const text = await res.text();
    const json = text && (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : undefined;
    const bad = responses.violation(method, path.split('?')[0]!, res.status, json);
    assert.equal(bad, undefined, `${method} ${path} → ${res.status} ${text.slice(0, 300)}`);
    return { status: res.status, headers: res.headers, json };
  };
  return { app, mgr, call };
}

describe('API middleware (app.request, no socket)', () => {
  it('serves /healthz without a token, and refuses everything else without the right one', async () => {
    const { call } = setup();
    assert.deepEqual((await call('GET', '/healthz', { token: null })).json, { ok: true });
    for (const token of [null, 'wrong-token-of-other-len', 'unit-test-tokeX']) {
      const r = await call('GET', '/v1/sessions', { token });
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'unauthorized');
    }
    assert.equal((await call('GET', '/v1/sessions')).status, 200);
  });

  it('refuses a foreign Host and any Origin before the token is looked at', async () => {
    const { call } = setup();
    const h = await call('GET', '/v1/sessions', { headers: { host: 'evil.example:7450' }, token: null });
    assert.equal(h.status, 403);
    assert.equal(h.json.error.code, 'forbidden_host');
    const o = await call('GET', '/v1/sessions', { headers: { origin: 'http://127.0.0.1:7450' } });
    assert.equal(o.status, 403);
    assert.equal(o.json.error.code, 'forbidden_origin');
  });

  it('answers an unknown path 404 not_found and a known path with the wrong method 405 with Allow', async () => {
    const { call } = setup();
    const nf = await call('GET', '/v1/nothing-here');
    assert.equal(nf.status, 404);
    assert.equal(nf.json.error.code, 'not_found');
    const na = await call('PUT', '/v1/sessions');
    assert.equal(na.status, 405);
    assert.equal(na.json.error.code, 'method_not_allowed');
    assert.match(na.headers.get('allow') ?? '', /GET/);
    assert.match(na.headers.get('allow') ?? '', /POST/);
  });

  it('refuses a body over the limit (413) and a body that is not JSON (400 invalid_json)', async () => {
    const { call, mgr } = setup({ maxBodyBytes: 1024 });
    const big = await call('POST', '/v1/sessions', { raw: JSON.stringify({ labels: { a: 'x'.repeat(2000) } }) });
    assert.equal(big.status, 413);
    assert.equal(big.json.error.code, 'payload_too_large');
    const bad = await call('POST', '/v1/sessions', { raw: '{"image": ' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_json');
    const spec = await call('POST', '/v1/sessions', { body: { image: 'minimal', cpus: -1 } });
    assert.equal(spec.status, 400);
    assert.equal(spec.json.error.code, 'invalid_spec');
    assert.equal(mgr.creates, 0);
  });

  it('rate-limits per token: a burst of 2 at 1/s lets two through and refuses the third with 429', async () => {
    const { call } = setup({ perSecond: 1, burst: 2 });
    assert.equal((await call('GET', '/v1/sessions')).status, 200);
    assert.equal((await call('GET', '/v1/sessions')).status, 200);
    const r = await call('GET', '/v1/sessions');
    assert.equal(r.status, 429);
    assert.equal(r.json.error.code, 'rate_limited');
  });

  it("creates a session in the spec's shape, then checks an expected generation on every session route", async () => {
    const { call } = setup();
    const c = await call('POST', '/v1/sessions', { body: { image: 'minimal', screen: '640x480' } });
    assert.equal(c.status, 201);
    assert.equal(c.headers.get('x-drums-generation'), '1');
    assert.deepEqual(c.json.screen, { width: 640, height: 480, depth: 24 });
    const id = c.json.id as string;
    assert.equal((await call('GET', `/v1/sessions/${id}?generation=1`)).status, 200);
    const r = await call('POST', `/v1/sessions/${id}/reset`, { body: { generation: 1 } });
    assert.equal(r.status, 200);
    assert.equal(r.json.generation, 2);
    const stale = await call('GET', `/v1/sessions/${id}`, { headers: { 'x-drums-generation': '1' } });
    assert.equal(stale.status, 409);
    assert.equal(stale.json.error.code, 'stale_generation');
    assert.equal(stale.headers.get('x-drums-generation'), '2');
    // The frame routes (VNC, stream, take-over) rely on the middleware's one check of it.
    for (const [method, path] of [
      ['GET', `/v1/sessions/${id}/vnc?generation=1`],
      ['GET', `/v1/sessions/${id}/stream?generation=1`],
      ['POST', `/v1/sessions/${id}/takeover?generation=1`],
    ] as const) {
      const r2 = await call(method, path, method === 'POST' ? { body: {} } : {});
      assert.equal(r2.status, 409, `${method} ${path}`);
      assert.equal(r2.json.error.code, 'stale_generation', `${method} ${path}`);
    }
    // The reset route checks a generation in its body, and the body's shape.
    const staleReset = await call('POST', `/v1/sessions/${id}/reset`, { body: { generation: 1 } });
    assert.equal(staleReset.status, 409);
    assert.equal(staleReset.json.error.code, 'stale_generation');
    assert.equal(staleReset.headers.get('x-drums-generation'), '2');
    const notObject = await call('POST', `/v1/sessions/${id}/reset`, { body: [2] });
    assert.equal(notObject.status, 400);
    assert.equal(notObject.json.error.details.field, 'body');
    const badGen = await call('POST', `/v1/sessions/${id}/reset`, { body: { generation: 'two' } });
    assert.equal(badGen.status, 400);
    assert.equal(badGen.json.error.details.field, 'generation');
    const extra = await call('POST', `/v1/sessions/${id}/reset`, { body: { generation: 2, force: true } });
    assert.equal(extra.status, 400);
    assert.equal(extra.json.error.code, 'invalid_request');
    assert.equal(extra.json.error.details.field, 'force');
    assert.equal((await call('DELETE', `/v1/sessions/${id}`)).status, 204);
    const gone = await call('GET', `/v1/sessions/${id}`);
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'session_not_found');
    assert.equal((await call('GET', '/v1/sessions/not-an-id')).json.error.code, 'session_not_found');
  });

  it('replays a create with the same Idempotency-Key and body, and refuses the key with another body', async () => {
    const { call, mgr } = setup();
    const key = { 'idempotency-key': 'k-1' };
    const a = await call('POST', '/v1/sessions', { body: { image: 'minimal' }, headers: key });
    assert.equal(a.status, 201);
    const b = await call('POST', '/v1/sessions', { body: { image: 'minimal' }, headers: key });
    assert.equal(b.status, 200);
    assert.equal(b.headers.get('idempotency-replayed'), 'true');
    assert.equal(b.json.id, a.json.id);
    assert.equal(mgr.creates, 1);
    const c = await call('POST', '/v1/sessions', { body: { image: 'default' }, headers: key });
    assert.equal(c.status, 409);
    assert.equal(c.json.error.code, 'idempotency_conflict');
    assert.equal(mgr.creates, 1);
  });

  it('answers a display-layer failure with its spec code and status (one error tree)', async () => {
    const { call } = setup();
    const id = (await call('POST', '/v1/sessions', { body: {} })).json.id as string;
    const shot = await call('GET', `/v1/sessions/${id}/screenshot`);
    assert.equal(shot.status, 503);
    assert.equal(shot.json.error.code, 'display_unavailable');
    const act = await call('POST', `/v1/sessions/${id}/actions`, { body: { actions: [{ type: 'click', x: 1, y: 1, button: 'nine' }] } });
    assert.equal(act.status, 400);
    assert.equal(act.json.error.code, 'invalid_action');
  });

  it('adds the fields a feature contributes through viewExtras to every session view', async () => {
    const mgr = new FakeManager();
    const osworld = { host: '127.0.0.1', serverPort: 1, chromiumPort: 2, vncPort: 0, vlcPort: 3, address: '127.0.0.1:1:2:0:3' };
    const app = createApp(mgr as unknown as SessionManager, new DisplayService(), {
      token: TOKEN,
      allowedHosts: ['127.0.0.1'],
      rateLimit: { perSecond: 0, burst: 1 },
      viewExtras: (s) => (s.spec.labels.osworld === '1' ? { osworld } : {}),
    });
    const headers = { host: '127.0.0.1', authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
    const on = await (await app.request('/v1/sessions', { method: 'POST', headers, body: JSON.stringify({ labels: { osworld: '1' } }) })).json();
    const off = await (await app.request('/v1/sessions', { method: 'POST', headers, body: '{}' })).json();
    assert.deepEqual(on.osworld, osworld);
    assert.equal(off.osworld, undefined);
    const list = await (await app.request('/v1/sessions', { headers })).json();
    assert.equal(responses.violation('GET', '/v1/sessions', 200, list), undefined);
    assert.deepEqual(
      list.sessions.map((s: { osworld?: unknown }) => !!s.osworld),
      [true, false],
    );
  });
});
