// The OSWorld guest server's Hono app (src/osworld/app.ts) through app.request(): no socket, no session
// runs anything. What it checks is what OSWorld's clients see without a desktop: Flask's 404 and 405
// pages, the Host and Origin refusals, the body limits (declared and streamed), a malformed JSON body,
// a bad command, a session that is gone or not ready; then, on a loopback socket through node-server as
// service.ts serves it, how a whole and a streamed reply go out. The routes' work inside a session is
// covered by tests/integration/osworld-*.test.ts.
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { loadConfig } from '../../src/common/config.ts';
import { guestApp, toResponse } from '../../src/osworld/app.ts';
import { json, type Reply } from '../../src/osworld/guest.ts';
import { FairScheduler } from '../../src/policy/fair-share.ts';
import type { DisplayService } from '../../src/session/display-service.ts';
import type { Session, SessionManager } from '../../src/session/manager.ts';

const BASE = 'http://127.0.0.1:5000';
const LIMIT = 4096;
const BUFFERED = 1024;

function setup(o: { state?: string; gone?: boolean } = {}) {
  const config = { ...loadConfig({}), osworldMaxBodyBytes: LIMIT, osworldMaxBufferedBodyBytes: BUFFERED };
  const mgr = { config, sessionEnv: () => ({ HOME: '/home/user' }) } as unknown as SessionManager;
  const session = { id: 's0000000001', state: o.state ?? 'ready', brokenReason: o.state === 'broken' ? 'unit test' : undefined } as unknown as Session;
  const fair = new FairScheduler({ slots: 2, maxQueue: 4 });
  const { app } = guestApp({ mgr, display: {} as DisplayService, fair, session: () => (o.gone ? undefined : session) });
  // OSWorld's client (requests) sends Host: 127.0.0.1:PORT; a web Request has no Host of its own.
  return (path: string, init: RequestInit & { duplex?: 'half' } = {}) =>
    app.request(`${BASE}${path}`, { ...init, headers: { host: '127.0.0.1:5000', ...(init.headers as Record<string, string>) } });
}

/** A request body of `n` bytes sent as a stream (no Content-Length: chunked on a socket). */
function streamOf(n: number): ReadableStream<Uint8Array> {
  let left = n;
  return new ReadableStream({
    pull(c) {
      if (left <= 0) return c.close();
      const k = Math.min(left, 700);
      left -= k;
      c.enqueue(new Uint8Array(k).fill(0x61));
    },
  });
}

const flask = (status: number, title: string, text: string) =>
  `<!doctype html>\n<html lang=en>\n<title>${status} ${title}</title>\n<h1>${title}</h1>\n<p>${text}</p>\n`;

describe('osworld guest app (app.request, no socket)', () => {
  it('answers an unknown path with Flask 404 page, GET / included (a provider readiness signal)', async () => {
    const call = setup();
    for (const path of ['/', '/nope', '/execute/', '/screenshot/x']) {
      const r = await call(path);
      assert.equal(r.status, 404, path);
      assert.equal(r.headers.get('content-type'), 'text/html; charset=utf-8');
      assert.equal(await r.text(), flask(404, 'Not Found', 'The requested URL was not found on the server.'));
    }
  });

  it('answers a known path with the wrong method with Flask 405 page (HEAD goes where GET goes)', async () => {
    const call = setup();
    for (const [method, path] of [
      ['GET', '/execute'],
      ['POST', '/screenshot'],
      ['PUT', '/file'],
      ['DELETE', '/setup/upload'],
      ['HEAD', '/end_recording'],
    ] as const) {
      const r = await call(path, { method });
      assert.equal(r.status, 405, `${method} ${path}`);
      assert.equal(r.headers.get('content-type'), 'text/html; charset=utf-8');
      if (method !== 'HEAD') assert.equal(await r.text(), flask(405, 'Method Not Allowed', 'The method is not allowed for the requested URL.'));
    }
  });

  it('refuses a foreign Host or Origin with 403 and closes the connection, before routing', async () => {
    const call = setup();
    const host = await call('/nope', { headers: { host: 'rebind.example:5000' } });
    assert.equal(host.status, 403);
    assert.equal(host.headers.get('connection'), 'close');
    assert.equal(((await host.json()) as { code: string }).code, 'forbidden_host');
    const port = await call('/screenshot', { headers: { host: '127.0.0.1:5001' } });
    assert.equal(((await port.json()) as { code: string }).code, 'forbidden_host');
    const origin = await call('/execute', { method: 'POST', headers: { origin: 'http://evil.example' }, body: '{}' });
    assert.equal(origin.status, 403);
    assert.equal(((await origin.json()) as { code: string }).code, 'forbidden_origin');
    // Its own origin and the bare names pass (here to a route that needs no session).
    const own: Record<string, string>[] = [
      { origin: 'http://127.0.0.1:5000' },
      { host: 'localhost' },
      { host: 'localhost:5000', origin: 'http://localhost:5000' },
    ];
    for (const headers of own) {
      assert.equal((await call('/nope', { headers })).status, 404, JSON.stringify(headers));
    }
  });

  it('refuses a declared or streamed body over the buffered limit with 413 JSON', async () => {
    const call = setup();
    const declared = await call('/execute', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(BUFFERED + 1) },
      body: 'x'.repeat(BUFFERED + 1),
    });
    assert.equal(declared.status, 413);
    assert.equal(declared.headers.get('content-type'), 'application/json');
    assert.deepEqual(await declared.json(), { status: 'error', message: `request body is over ${BUFFERED} bytes` });
    const streamed = await call('/execute', { method: 'POST', body: streamOf(BUFFERED * 3), duplex: 'half' });
    assert.equal(streamed.status, 413);
    assert.deepEqual(await streamed.json(), { status: 'error', message: `request body is over ${BUFFERED} bytes` });
    // The streamed route (/setup/upload) has the larger limit: the same size passes the limit there and is a bad form.
    const form = await call('/setup/upload', { method: 'POST', body: streamOf(BUFFERED * 3), duplex: 'half' });
    assert.deepEqual([form.status, await form.json()], [400, { error: 'file_path and file_data are required' }]);
    const upload = await call('/setup/upload', {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=xyz' },
      body: streamOf(LIMIT + 1),
      duplex: 'half',
    });
    assert.deepEqual([upload.status, await upload.json()], [413, { status: 'error', message: `request body is over ${LIMIT} bytes` }]);
    const upDeclared = await call('/setup/upload', { method: 'POST', headers: { 'content-length': String(LIMIT + 1) }, body: 'y'.repeat(LIMIT + 1) });
    assert.equal(upDeclared.status, 413);
  });

  it('answers a malformed JSON body with Flask 400 page, and a bad command with the contract 500 JSON', async () => {
    const call = setup();
    const bad = await call('/execute', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"command": ' });
    assert.equal(bad.status, 400);
    assert.equal(await bad.text(), flask(400, 'Bad Request', 'Failed to decode JSON object'));
    const cmd = await call('/execute', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"command": 5}' });
    assert.equal(cmd.status, 500);
    assert.equal(cmd.headers.get('content-type'), 'application/json');
    assert.deepEqual(await cmd.json(), { status: 'error', message: "'command' must be a str or a list of str, got number" });
    const noPath = await call('/list_directory', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.deepEqual([noPath.status, await noPath.json()], [400, { error: "Missing 'path' parameter" }]);
    const noFile = await call('/file', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'other=1' });
    assert.deepEqual([noFile.status, await noFile.json()], [400, { error: 'file_path is required' }]);
  });

  it('answers 503 when the session is gone and 500 naming its state when it is not ready', async () => {
    const gone = await setup({ gone: true })('/execute', { method: 'POST', body: '{"command": "true"}' });
    assert.deepEqual([gone.status, await gone.json()], [503, { status: 'error', message: 'the session is gone' }]);
    const goneUpload = await setup({ gone: true })('/setup/upload', { method: 'POST', body: 'x' });
    assert.equal(goneUpload.status, 503);
    const broken = await setup({ state: 'broken' })('/execute', { method: 'POST', body: '{"command": "true"}' });
    assert.deepEqual([broken.status, await broken.json()], [500, { status: 'error', message: 'session s0000000001 is broken: unit test' }]);
  });
});

describe('osworld guest replies on a socket (node-server, as service.ts serves them)', () => {
  /** Serves one reply at GET / through the guest's toResponse and node-server's listener, on 127.0.0.1. */
  async function serveReply(reply: () => Reply) {
    const app = new Hono();
    app.get('/', () => toResponse(reply()));
    const server = createServer(getRequestListener(app.fetch, { autoCleanupIncoming: false }));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    /** The response's head and body as the client got them, and how the body ended. */
    const get = () =>
      new Promise<{ headers: Record<string, unknown>; body: Buffer; ended: 'complete' | 'cut' }>((resolve, reject) => {
        const chunks: Buffer[] = [];
        const req = request({ host: '127.0.0.1', port, path: '/' }, (res) => {
          res.on('data', (d: Buffer) => chunks.push(d));
          res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks), ended: res.complete ? 'complete' : 'cut' }));
          res.on('error', () => resolve({ headers: res.headers, body: Buffer.concat(chunks), ended: 'cut' }));
        });
        req.on('error', reject);
        req.end();
      });
    return { get, close: () => new Promise<void>((r) => server.close(() => r())) };
  }

  it('sends a whole reply with its Content-Length, and a stream chunked, complete only when the stream ended', async () => {
    const whole = await serveReply(() => json(200, { ok: true }));
    try {
      const r = await whole.get();
      assert.deepEqual(
        [r.headers['content-length'], r.headers['transfer-encoding'], r.body.toString(), r.ended],
        ['12', undefined, '{"ok":true}\n', 'complete'],
      );
    } finally {
      await whole.close();
    }
    const streamed = await serveReply(() => ({ status: 200, type: 'video/mp4', body: Readable.from([Buffer.alloc(100_000, 1), Buffer.alloc(100_000, 2)]) }));
    try {
      const r = await streamed.get();
      assert.deepEqual(
        [r.headers['content-length'], r.headers['transfer-encoding'], r.headers['content-type'], r.body.length, r.ended],
        [undefined, 'chunked', 'video/mp4', 200_000, 'complete'],
      );
    } finally {
      await streamed.close();
    }
  });

  it('cuts the connection when a streamed body fails midway: the client never sees a complete-looking reply', async () => {
    const failing = await serveReply(() => {
      const body = new PassThrough();
      body.write(Buffer.alloc(50_000, 1));
      setTimeout(() => body.destroy(new Error('the reader in the session failed')), 50);
      return { status: 200, type: 'application/octet-stream', body };
    });
    try {
      const r = await failing.get();
      assert.equal(r.ended, 'cut', `the client got ${r.body.length} bytes and a complete reply`);
      assert.ok(r.body.length <= 50_000);
    } finally {
      await failing.close();
    }
  });
});
