// The WebSocket frame stream (GET /v1/sessions/:id/stream) and take-over, on a real `minimal`
// session: damage-driven frames, input on the same socket, bad parameters, token and Origin
// checks, slow consumers dropping frames, and take-over blocking agent input with 409.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import sharp from 'sharp';
import WebSocket from 'ws';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

type Msg = { type: string; [k: string]: unknown };

/** A stream client that records text messages and binary frames. */
class Viewer {
  readonly ws: WebSocket;
  readonly texts: Msg[] = [];
  readonly frames: Buffer[] = [];
  readonly opened: Promise<void>;
  constructor(url: string, opts: WebSocket.ClientOptions, protocols: string[] = ['drums']) {
    this.ws = new WebSocket(url, protocols, opts);
    this.ws.on('message', (data, binary) => {
      if (binary) this.frames.push(data as Buffer);
      else this.texts.push(JSON.parse(String(data)) as Msg);
    });
    this.opened = new Promise((res, rej) => {
      this.ws.once('open', () => res());
      this.ws.once('error', rej);
      this.ws.once('unexpected-response', (_q, r) => rej(new Error(`status ${r.statusCode}`)));
    });
  }
  async until<T>(what: string, fn: () => T | undefined | false, ms = 20_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const v = fn();
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; texts ${JSON.stringify(this.texts.slice(-5))}, ${this.frames.length} frames`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  send(o: unknown): void {
    this.ws.send(JSON.stringify(o));
  }
  reply(id: number): Promise<Msg> {
    return this.until(`reply ${id}`, () => this.texts.find((m) => m.id === id && (m.type === 'result' || m.type === 'error')));
  }
  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((res) => {
      this.ws.once('close', () => res());
      this.ws.close();
    });
  }
}

/** The status an upgrade attempt is refused with (or 101). */
function upgradeStatus(url: string, headers: Record<string, string>, protocols = ['drums']): Promise<number> {
  return new Promise((res) => {
    const ws = new WebSocket(url, protocols, { headers });
    ws.once('open', () => {
      ws.close();
      res(101);
    });
    ws.once('unexpected-response', (_q, r) => {
      r.resume();
      res(r.statusCode ?? 0);
    });
    ws.once('error', () => res(-1));
  });
}

describe('frame stream and take-over (minimal image)', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  let wsBase: string;
  const viewers: Viewer[] = [];
  const auth = () => ({ authorization: `Bearer ${d.token}` });
  const view = (q: string, headers: Record<string, string> = auth()) => {
    const v = new Viewer(`${wsBase}/v1/sessions/${s.id}/stream?${q}`, { headers });
    viewers.push(v);
    return v;
  };
  const act = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${d.url}/v1/sessions/${s.id}/actions`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const code = async (r: Response) => ((await r.json()) as { error: { code: string } }).error.code;

  before(async () => {
    d = await startDaemon();
    wsBase = d.url.replace(/^http/, 'ws');
    s = await d.client.createSession({ image: 'minimal', screen: '800x600' });
  });
  after(async () => {
    try {
      for (const v of viewers) await v.close();
      if (s) await d.client.destroySession(s.id);
    } finally {
      await d?.finish();
    }
  });

  it('bad fps, format, quality and scale are 4xx with stable codes; a plain GET is 426', async () => {
    const get = (q: string) => fetch(`${d.url}/v1/sessions/${s.id}/stream?${q}`, { headers: auth() });
    for (const [q, want] of [
      ['fps=0', 'invalid_request'],
      ['fps=31', 'invalid_request'],
      ['fps=abc', 'invalid_request'],
      ['format=gif', 'invalid_format'],
      ['quality=0', 'invalid_format'],
      ['quality=101', 'invalid_format'],
      ['scale=900x10', 'invalid_region'],
      ['scale=2', 'invalid_region'],
      ['scale=ax1', 'invalid_region'],
      ['colour=red', 'invalid_request'],
    ] as const) {
      const r = await get(q);
      assert.equal(r.status, 400, q);
      assert.equal(await code(r), want, q);
    }
    const plain = await get('fps=2');
    assert.equal(plain.status, 426);
    assert.equal(await code(plain), 'upgrade_required');
    // The same checks refuse the upgrade itself.
    assert.equal(await upgradeStatus(`${wsBase}/v1/sessions/${s.id}/stream?fps=99`, auth()), 400);
  });

  it('no token, a wrong token or a foreign Origin is refused; the same origin with the token subprotocol works', async () => {
    const url = `${wsBase}/v1/sessions/${s.id}/stream?fps=2`;
    assert.equal(await upgradeStatus(url, {}), 401);
    assert.equal(await upgradeStatus(url, { authorization: 'Bearer nope' }), 401);
    assert.equal(await upgradeStatus(url, { ...auth(), origin: 'http://evil.example' }), 403);
    const host = new URL(d.url).host;
    assert.equal(await upgradeStatus(url, { ...auth(), origin: `http://127.0.0.1:1` }), 403);
    assert.equal(await upgradeStatus(url, { origin: `http://${host}` }, ['drums', `drums.token.${d.token}`]), 101);
    assert.equal(await upgradeStatus(url, { origin: `http://${host}` }, ['drums', 'drums.token.wrong']), 401);
  });

  it('sends a frame, then only on change; input on the socket drives the session', async () => {
    const v = view('fps=10&format=jpeg&scale=400x300&quality=60');
    await v.opened;
    const hello = await v.until('hello', () => v.texts.find((m) => m.type === 'hello'));
    assert.deepEqual([hello.width, hello.height, hello.format, hello.generation], [400, 300, 'jpeg', 1]);
    await v.until('first frame', () => v.frames.length >= 1);
    const meta = await sharp(v.frames[0]).metadata();
    assert.deepEqual([meta.format, meta.width, meta.height], ['jpeg', 400, 300]);
    // An idle screen: at 10 fps for 1.5 s, at most a couple more frames (not ~15).
    const n0 = v.frames.length;
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(v.frames.length - n0 <= 2, `${v.frames.length - n0} frames of an unchanged screen`);
    // Input in stream coordinates (400x300 → 800x600): the pointer lands at (2x, 2y).
    const n1 = v.frames.length;
    v.send({ id: 1, actions: [{ type: 'move', x: 150, y: 100 }] });
    const r = await v.reply(1);
    assert.equal(r.type, 'result', JSON.stringify(r));
    assert.deepEqual((await d.client.windows(s.id)).cursor, { x: 300, y: 200 });
    await v.until('a frame after the move', () => v.frames.length > n1);
    // Bad input is an error message, the socket stays usable.
    v.send({ id: 2, actions: [{ type: 'teleport' }] });
    assert.equal(((await v.reply(2)).error as { code: string }).code, 'invalid_action');
    v.ws.send('not json');
    await v.until('invalid_json', () => v.texts.find((m) => m.type === 'error' && (m.error as { code: string }).code === 'invalid_json'));
    v.send({ id: 3, actions: [{ type: 'move', x: 10, y: 10 }] });
    assert.equal((await v.reply(3)).type, 'result');
    await v.close();
  });

  it('a take-over blocks agent input with 409 until released; a second take-over is 409', async () => {
    const agent = view('fps=2');
    await agent.opened;
    const take = await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ holder: 'tester' }),
    });
    assert.equal(take.status, 201);
    const t = (await take.json()) as { id: string; holder: string };
    assert.equal(t.holder, 'tester');
    // Visible in the API.
    const seen = (await (await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, { headers: auth() })).json()) as { takeover: { holder: string } };
    assert.equal(seen.takeover.holder, 'tester');
    const usage = (await (await fetch(`${d.url}/v1/usage`, { headers: auth() })).json()) as {
      sessions: Array<{ id: string; takeover: unknown; memoryBytes: number }>;
    };
    const mine = usage.sessions.find((u) => u.id === s.id)!;
    assert.deepEqual((mine.takeover as { holder: string }).holder, 'tester');
    assert.ok(mine.memoryBytes > 1024 * 1024, 'memory from the cgroup');
    await agent.until('state with the take-over', () => agent.texts.find((m) => m.type === 'state' && m.takeover));
    // The agent: 409 over HTTP and on the socket.
    const blocked = await act({ actions: [{ type: 'move', x: 5, y: 5 }] });
    assert.equal(blocked.status, 409);
    assert.equal(await code(blocked), 'session_taken_over');
    agent.send({ id: 7, actions: [{ type: 'move', x: 5, y: 5 }] });
    assert.equal(((await agent.reply(7)).error as { code: string }).code, 'session_taken_over');
    // Someone else taking it over: 409.
    const second = await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, { method: 'POST', headers: auth() });
    assert.equal(second.status, 409);
    assert.equal(await code(second), 'takeover_held');
    // The holder drives it, over HTTP and over its own socket.
    assert.equal((await act({ actions: [{ type: 'move', x: 42, y: 43 }] }, { 'x-drums-takeover': t.id })).status, 200);
    const person = view(`fps=5&takeover=${t.id}`);
    await person.opened;
    person.send({ id: 1, actions: [{ type: 'move', x: 44, y: 45 }] });
    assert.equal((await person.reply(1)).type, 'result');
    assert.deepEqual((await d.client.windows(s.id)).cursor, { x: 44, y: 45 });
    assert.equal(await upgradeStatus(`${wsBase}/v1/sessions/${s.id}/stream?takeover=wrong`, auth()), 404);
    // Release with a wrong id: 409; with the right one: 204; then the agent acts again.
    assert.equal((await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, { method: 'DELETE', headers: { ...auth(), 'x-drums-takeover': 'wrong' } })).status, 409);
    assert.equal((await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, { method: 'DELETE', headers: { ...auth(), 'x-drums-takeover': t.id } })).status, 204);
    assert.equal((await fetch(`${d.url}/v1/sessions/${s.id}/takeover`, { method: 'DELETE', headers: auth() })).status, 404);
    assert.equal((await act({ actions: [{ type: 'move', x: 6, y: 6 }] })).status, 200);
    agent.send({ id: 8, actions: [{ type: 'move', x: 7, y: 7 }] });
    assert.equal((await agent.reply(8)).type, 'result');
    await agent.close();
    await person.close();
  });

  it('a consumer that does not read gets frames dropped, not queued', async () => {
    const before = (await (await fetch(`${d.url}/v1/streams`, { headers: auth() })).json()) as { dropped: number; sent: number };
    const slow = view('fps=30&format=png');
    await slow.opened;
    await slow.until('first frame', () => slow.frames.length >= 1);
    // Stop reading: the kernel buffers fill, then the daemon must skip frames.
    (slow.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    // A busy screen: an xterm flooding text for a few seconds.
    const flood = d.client
      .exec(s.id, { shell: 'timeout 60 xterm -geometry 132x45+0+0 -e sh -c "od -An -tx1 -v /dev/urandom" & echo $! > /tmp/flood.pid; wait', timeoutMs: 90_000 })
      .catch(() => undefined);
    const end = Date.now() + 50_000;
    let after = before;
    while (Date.now() < end) {
      after = (await (await fetch(`${d.url}/v1/streams`, { headers: auth() })).json()) as typeof before;
      if (after.dropped > before.dropped + 5) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(after.dropped > before.dropped + 5, `dropped ${after.dropped - before.dropped}, sent ${after.sent - before.sent}`);
    slow.ws.terminate();
    await d.client.exec(s.id, { shell: 'kill "$(cat /tmp/flood.pid)"' });
    await flood;
    // Still exactly one open stream socket left from this test? None: the daemon saw the close.
    await new Promise((r) => setTimeout(r, 200));
  });
});
