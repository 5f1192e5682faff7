// On-demand VNC (GET /v1/sessions/:id/vnc, and `drums session vnc` for standard viewers) on a
// real `minimal` session: x11vnc starts with the first viewer, speaks RFB with the session's
// screen size, and is gone after the last viewer leaves.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { SessionInfo } from '../../src/client/client.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { recordedCookie } from '../../bench/host-probes/x11.ts';
import { DRUMS, startDaemon, type TestDaemon } from '../helpers.ts';

/** Reads RFB bytes from a stream of chunks. */
class Rfb {
  private buf = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  push(d: Buffer): void {
    this.buf = Buffer.concat([this.buf, d]);
    for (const w of this.waiters.splice(0)) w();
  }
  async take(n: number, ms = 15_000): Promise<Buffer> {
    const end = Date.now() + ms;
    while (this.buf.length < n) {
      if (Date.now() > end) throw new Error(`timed out reading ${n} RFB bytes (have ${this.buf.length})`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
}

/** RFB 3.8 handshake with security None; returns the framebuffer size from ServerInit. */
async function handshake(rfb: Rfb, send: (b: Buffer) => void): Promise<{ width: number; height: number }> {
  assert.equal((await rfb.take(12)).toString(), 'RFB 003.008\n');
  send(Buffer.from('RFB 003.008\n'));
  const n = (await rfb.take(1))[0]!;
  const types = [...(await rfb.take(n))];
  assert.ok(types.includes(1), `security None offered (${types})`);
  send(Buffer.from([1]));
  assert.equal((await rfb.take(4)).readUInt32BE(0), 0, 'security result OK');
  send(Buffer.from([1])); // ClientInit: shared
  const init = await rfb.take(24);
  await rfb.take(init.readUInt32BE(20)); // the desktop name
  return { width: init.readUInt16BE(0), height: init.readUInt16BE(2) };
}

/** A 16x16 framebuffer update request and its whole (raw-encoded) answer: a barrier, since the daemon and x11vnc handle a viewer's messages in order. */
async function roundTrip(rfb: Rfb, send: (b: Buffer) => void): Promise<void> {
  send(Buffer.from([3, 0, 0, 0, 0, 0, 0, 16, 0, 16]));
  const head = await rfb.take(4);
  assert.equal(head[0], 0, 'a FramebufferUpdate');
  for (let i = head.readUInt16BE(2); i > 0; i--) {
    const r = await rfb.take(12);
    assert.equal(r.readInt32BE(8), 0, 'raw encoding');
    await rfb.take(r.readUInt16BE(4) * r.readUInt16BE(6) * 4);
  }
}

const pointer = (x: number, y: number) => Buffer.from([5, 0, x >> 8, x & 0xff, y >> 8, y & 0xff]);

describe('on-demand VNC (minimal image)', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  const running = async () => (await d.client.exec(s.id, { shell: 'pgrep -x x11vnc >/dev/null && echo yes || echo no' })).stdout.trim() === 'yes';
  const until = async (what: string, fn: () => Promise<boolean>, ms = 60_000) => {
    const end = Date.now() + ms;
    while (!(await fn())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'minimal', screen: '800x600' });
  });
  after(async () => {
    try {
      if (s) await d.client.destroySession(s.id);
    } finally {
      await d?.finish();
    }
  });

  it('starts x11vnc for the first viewer, shares it, and stops it after the last', { timeout: 120_000 }, async () => {
    assert.equal(await running(), false, 'nothing runs before a viewer asks');
    const plain = await fetch(`${d.url}/v1/sessions/${s.id}/vnc`, { headers: { authorization: `Bearer ${d.token}` } });
    assert.equal(plain.status, 426);
    const views: WebSocket[] = [];
    for (let i = 0; i < 2; i++) {
      const ws = d.client.webSocket(`/v1/sessions/${s.id}/vnc`, 'binary');
      const rfb = new Rfb();
      ws.on('message', (m) => rfb.push(m as Buffer));
      await new Promise((res, rej) => {
        ws.once('open', res);
        ws.once('error', rej);
      });
      assert.deepEqual(await handshake(rfb, (b) => ws.send(b)), { width: 800, height: 600 });
      views.push(ws);
    }
    assert.equal(await running(), true);
    views[0]!.close();
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await running(), true, 'one viewer left: still running');
    views[1]!.close();
    await until('x11vnc to stop after the last viewer', async () => !(await running()));
  });

  it('viewers are view-only unless they hold the take-over', { timeout: 120_000 }, async () => {
    const open = async (query = '') => {
      const ws = d.client.webSocket(`/v1/sessions/${s.id}/vnc${query}`, 'binary');
      const rfb = new Rfb();
      ws.on('message', (m) => rfb.push(m as Buffer));
      await new Promise((res, rej) => {
        ws.once('open', res);
        ws.once('error', rej);
      });
      const send = (b: Buffer) => ws.send(b);
      await handshake(rfb, send);
      return { ws, rfb, send };
    };
    const cursor = async () => (await d.client.windows(s.id)).cursor;
    const stays = async (x: number, y: number) => {
      // The daemon has handled the input once the barrier is answered; give x11vnc a moment more.
      const end = Date.now() + 1500;
      while (Date.now() < end) {
        const c = await cursor();
        assert.deepEqual([c.x, c.y], [x, y], 'view-only input moved the pointer');
        await new Promise((r) => setTimeout(r, 150));
      }
    };
    await d.client.act(s.id, { actions: [{ type: 'move', x: 10, y: 10 }] });
    const watcher = await open();
    let holder: Awaited<ReturnType<typeof open>> | undefined;
    try {
      // Nobody holds it: a plain viewer is still view-only.
      watcher.send(pointer(300, 200));
      await roundTrip(watcher.rfb, watcher.send);
      await stays(10, 10);

      // A wrong take-over id is refused before the upgrade.
      const wrong = await fetch(`${d.url}/v1/sessions/${s.id}/vnc?takeover=nope`, { headers: { authorization: `Bearer ${d.token}` } });
      assert.equal(wrong.status, 404);
      assert.equal(((await wrong.json()) as { error: { code: string } }).error.code, 'takeover_not_found');

      // The holder's viewer drives; the agent and the other viewer do not.
      const t = await d.client.takeOver(s.id, 'vnc-test');
      holder = await open(`?takeover=${t.id}`);
      holder.send(pointer(300, 200));
      await until('the holder moved the pointer', async () => {
        const c = await cursor();
        return c.x === 300 && c.y === 200;
      });
      await assert.rejects(d.client.act(s.id, { actions: [{ type: 'move', x: 1, y: 1 }] }), (e: { code?: string }) => e.code === 'session_taken_over');
      watcher.send(pointer(50, 60));
      await roundTrip(watcher.rfb, watcher.send);
      await stays(300, 200);

      // Released: the former holder's viewer is view-only again.
      await d.client.releaseTakeover(s.id, t.id);
      holder.send(pointer(400, 400));
      await roundTrip(holder.rfb, holder.send);
      await stays(300, 200);
    } finally {
      watcher.ws.close();
      holder?.ws.close();
      await d.client.releaseTakeover(s.id).catch(() => {});
    }
    await until('x11vnc to stop after the last viewer', async () => !(await running()));
  });

  it('releasing a take-over mid-drag releases the button and keys the holder still has down', { timeout: 120_000 }, async () => {
    // The session's X server as the test sees it: its own connection on the session's socket
    // (the X server's state, not the daemon's idea of it).
    const x = await XDisplay.open(join(d.stateDir, 'rt', s.id, 'x11', 'X0'), { timeoutMs: 10_000, cookie: recordedCookie(d.stateDir, s.id) });
    const held = async () => {
      const c = x.conn;
      const p = await c.request<{ keyMask: number }>('QueryPointer', (cb) => c.x.QueryPointer(c.root, cb));
      const keys = await c.request<Buffer>('QueryKeymap', (cb) => (c.x as any).QueryKeymap(cb));
      return { button1: (p.keyMask & 0x100) !== 0, keys: [...keys.subarray(0, 32)].reduce((n, b) => n + (b ? 1 : 0), 0) };
    };
    const t = await d.client.takeOver(s.id, 'drag-test');
    const ws = d.client.webSocket(`/v1/sessions/${s.id}/vnc?takeover=${t.id}`, 'binary');
    try {
      const rfb = new Rfb();
      ws.on('message', (m) => rfb.push(m as Buffer));
      await new Promise((res, rej) => {
        ws.once('open', res);
        ws.once('error', rej);
      });
      const send = (b: Buffer) => ws.send(b);
      await handshake(rfb, send);
      assert.deepEqual(await held(), { button1: false, keys: 0 }, 'nothing down before the drag');
      // A drag begun (button 1 down, moving) with Shift held, then the take-over let go.
      send(Buffer.from([5, 1, 0, 100, 0, 100]));
      send(Buffer.from([4, 1, 0, 0, 0, 0, 0xff, 0xe1])); // KeyEvent down, XK_Shift_L
      send(Buffer.from([5, 1, 0, 150, 0, 120]));
      await roundTrip(rfb, send);
      await until('x11vnc to press the button and the key', async () => {
        const h = await held();
        return h.button1 && h.keys > 0;
      });
      await d.client.releaseTakeover(s.id, t.id);
      // The release answered: nothing is down any more, so the agent's next click is a click.
      assert.deepEqual(await held(), { button1: false, keys: 0 }, 'the take-over release left input held');
      await d.client.act(s.id, { actions: [{ type: 'click', x: 20, y: 20 }] });
      assert.deepEqual(await held(), { button1: false, keys: 0 });
    } finally {
      ws.close();
      await d.client.releaseTakeover(s.id).catch(() => {});
      await x.close();
    }
    await until('x11vnc to stop after the last viewer', async () => !(await running()));
  });

  it('refuses a foreign Origin and a missing token', async () => {
    const status = (headers: Record<string, string>) =>
      new Promise<number>((res) => {
        const ws = new WebSocket(`${d.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/vnc`, ['binary'], { headers });
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
    assert.equal(await status({}), 401);
    assert.equal(await status({ authorization: `Bearer ${d.token}`, origin: 'http://evil.example' }), 403);
    assert.equal(await running(), false);
  });

  it('`drums session vnc` serves a standard VNC client over local TCP', { timeout: 120_000 }, async () => {
    const cli = spawn(DRUMS, ['session', 'vnc', s.id, '--port', '0'], { env: d.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let tcp: ReturnType<typeof connect> | undefined;
    try {
      const port = await new Promise<number>((res, rej) => {
        let out = '';
        cli.stdout!.on('data', (b: Buffer) => {
          out += b;
          const m = /127\.0\.0\.1:(\d+)/.exec(out);
          if (m) res(Number(m[1]));
        });
        cli.once('exit', (c) => rej(new Error(`drums session vnc exited ${c}`)));
      });
      const sock = connect(port, '127.0.0.1');
      tcp = sock;
      const rfb = new Rfb();
      sock.on('data', (b) => rfb.push(b));
      assert.deepEqual(await handshake(rfb, (b) => sock.write(b)), { width: 800, height: 600 });
      // A framebuffer update request gets pixels back (message type 0).
      sock.write(Buffer.from([3, 0, 0, 0, 0, 0, 0, 16, 0, 16]));
      assert.equal((await rfb.take(1))[0], 0);
      sock.destroy();
      tcp = undefined;
      await until('x11vnc to stop after the TCP viewer left', async () => !(await running()));
    } finally {
      tcp?.destroy();
      if (cli.exitCode === null && cli.signalCode === null) {
        const exited = new Promise((r) => cli.once('exit', r));
        cli.kill('SIGINT');
        await exited;
      }
    }
  });
});
