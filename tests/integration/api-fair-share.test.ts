import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'node:http';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startDaemon, TIME_SCALE, type TestDaemon } from '../helpers.ts';

/** One GET over `agent`: status, headers and the body as text (images as their length). */
function get(d: TestDaemon, agent: Agent, path: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  const u = new URL(path, d.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: u.pathname + u.search, agent, headers: { authorization: `Bearer ${d.token}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (b: Buffer) => chunks.push(b));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        resolve({
          status: res.statusCode!,
          headers: res.headers,
          body: /json|text/.test(String(res.headers['content-type'])) ? body.toString() : `<${body.length} bytes>`,
        });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const daemonFds = (d: TestDaemon) => {
  const { pid } = JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number };
  return readdirSync(`/proc/${pid}/fd`).length;
};

const gauge = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);

// A flood on one session's id over many connections waits in that session's own queue, and past
// DRUMS_FAIR_QUEUE gets 429 rate_limited with Retry-After; a client on another session that sends
// one request at a time is never refused, and nothing is left behind.
describe('fair share between sessions on a real daemon', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_FAIR_QUEUE: '4' });
  });
  after(async () => {
    await d.finish();
  });

  it('a flood on one session gets 429s with Retry-After while a one-at-a-time client on another sees none', { timeout: 180_000 * TIME_SCALE }, async () => {
    const flooded = await d.client.createSession({ image: 'minimal' });
    const good = await d.client.createSession({ image: 'minimal' });
    try {
      // Warm both (first connection, first frame).
      await d.client.screenshot(flooded.id, 'png');
      await d.client.screenshot(good.id, 'png');
      const fds0 = daemonFds(d);
      const agent = new Agent({ keepAlive: true, maxSockets: 32 });
      const counts: Record<string, number> = {};
      let refusal: Awaited<ReturnType<typeof get>> | undefined;
      let stop = false;
      const flood = Array.from({ length: 24 }, async () => {
        while (!stop) {
          const r = await get(d, agent, `/v1/sessions/${flooded.id}/screenshot?format=png`).catch((e) => ({ status: -1, headers: {}, body: String(e) }));
          counts[r.status] = (counts[r.status] ?? 0) + 1;
          if (r.status === 429) refusal ??= r;
          // A flooder that ignores Retry-After, but does not spin on the refusals.
          if (r.status === 429) await new Promise((res) => setTimeout(res, 20));
        }
      });
      // The well-behaved client: a click, then a screenshot, one request at a time.
      const goodStatuses: number[] = [];
      try {
        for (let i = 0; i < 25; i++) {
          await d.client.act(good.id, { actions: [{ type: 'click', x: 10 + i * 7, y: 10 + i * 5 }] });
          goodStatuses.push(200);
          const shot = await get(d, agent, `/v1/sessions/${good.id}/screenshot?format=png`);
          goodStatuses.push(shot.status);
        }
        // While the flood is on, /metrics shows its queue.
        const m = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
        assert.ok(
          gauge(m, 'drums_fair_share_waiting') >= 1,
          m
            .split('\n')
            .filter((l) => l.startsWith('drums_fair'))
            .join('\n'),
        );
      } finally {
        stop = true;
        await Promise.all(flood);
      }
      assert.deepEqual(
        goodStatuses.filter((s) => s !== 200),
        [],
        `the one-at-a-time client was refused: ${JSON.stringify(goodStatuses)}`,
      );
      assert.ok((counts['200'] ?? 0) > 0, `the flood was never served: ${JSON.stringify(counts)}`);
      assert.ok(refusal, `the flood was never refused: ${JSON.stringify(counts)}`);
      assert.deepEqual(Object.keys(counts).sort(), ['200', '429'], JSON.stringify(counts));
      assert.equal(refusal.headers['retry-after'], '1');
      const err = (JSON.parse(refusal.body) as { error: { code: string; message: string; details: { scope: string; maxQueue: number } } }).error;
      assert.equal(err.code, 'rate_limited');
      assert.equal(err.details.scope, 'session');
      assert.equal(err.details.maxQueue, 4);
      assert.match(err.message, /one request at a time per session/);
      agent.destroy();
      // Nothing left: no request waits or runs, the tracked sessions expire, the sockets are closed,
      // and the flooded session answers at once.
      const end = Date.now() + 20_000 * TIME_SCALE;
      let m = '';
      for (;;) {
        m = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}`, connection: 'close' } })).text();
        if ((gauge(m, 'drums_fair_share_sessions') === 0 && daemonFds(d) <= fds0 + 2) || Date.now() > end) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.equal(gauge(m, 'drums_fair_share_waiting'), 0);
      assert.equal(gauge(m, 'drums_fair_share_running'), 0);
      assert.equal(gauge(m, 'drums_fair_share_sessions'), 0);
      assert.ok(daemonFds(d) <= fds0 + 2, `daemon fds ${fds0} before the flood, ${daemonFds(d)} after`);
      const t = performance.now();
      await d.client.screenshot(flooded.id, 'png');
      assert.ok(performance.now() - t < 5000 * TIME_SCALE);
    } finally {
      await d.client.destroySession(flooded.id).catch(() => {});
      await d.client.destroySession(good.id).catch(() => {});
    }
  });

  it("the OSWorld guest /screenshot shares the fair share: a flood there gets the guest's 429 with Retry-After, the API client on another session none", {
    timeout: 180_000 * TIME_SCALE,
  }, async () => {
    const flooded = (await d.client.createSession({ image: 'minimal', labels: { 'drums.osworld': '1' } } as never)) as unknown as {
      id: string;
      osworld?: { serverPort: number };
    };
    const good = await d.client.createSession({ image: 'minimal' });
    try {
      const guest = `http://127.0.0.1:${flooded.osworld!.serverPort}`;
      assert.equal((await fetch(`${guest}/screenshot`)).status, 200);
      const agent = new Agent({ keepAlive: true, maxSockets: 32 });
      const counts: Record<string, number> = {};
      let refusal: { headers: Record<string, string | string[] | undefined>; body: string } | undefined;
      let stop = false;
      const flood = Array.from({ length: 24 }, async () => {
        while (!stop) {
          const r = await new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }>((resolve) => {
            const req = request(`${guest}/screenshot`, { agent }, (res) => {
              const chunks: Buffer[] = [];
              res.on('data', (b: Buffer) => chunks.push(b));
              res.on('end', () =>
                resolve({ status: res.statusCode!, headers: res.headers, body: res.statusCode === 200 ? '' : Buffer.concat(chunks).toString() }),
              );
              res.on('error', () => resolve({ status: -1, headers: {}, body: '' }));
            });
            req.on('error', () => resolve({ status: -1, headers: {}, body: '' }));
            req.end();
          });
          counts[r.status] = (counts[r.status] ?? 0) + 1;
          if (r.status === 429) {
            refusal ??= r;
            await new Promise((res) => setTimeout(res, 20));
          }
        }
      });
      const goodStatuses: number[] = [];
      try {
        for (let i = 0; i < 20; i++) {
          await d.client.act(good.id, { actions: [{ type: 'click', x: 10 + i * 7, y: 10 + i * 5 }] });
          goodStatuses.push((await get(d, agent, `/v1/sessions/${good.id}/screenshot?format=png`)).status);
        }
      } finally {
        stop = true;
        await Promise.all(flood);
        agent.destroy();
      }
      assert.deepEqual(
        goodStatuses.filter((x) => x !== 200),
        [],
      );
      assert.deepEqual(Object.keys(counts).sort(), ['200', '429'], JSON.stringify(counts));
      assert.equal(refusal!.headers['retry-after'], '1');
      const body = JSON.parse(refusal!.body) as { status: string; code: string; message: string };
      assert.deepEqual([body.status, body.code], ['error', 'rate_limited']);
      assert.match(body.message, /one request at a time per session/);
    } finally {
      await d.client.destroySession(flooded.id).catch(() => {});
      await d.client.destroySession(good.id).catch(() => {});
    }
  });

  it('exec takes no slot but a session may have at most DRUMS_FAIR_QUEUE in flight: one more is 429, another session is not held', {
    timeout: 120_000 * TIME_SCALE,
  }, async () => {
    const busy = await d.client.createSession({ image: 'minimal' });
    const other = await d.client.createSession({ image: 'minimal' });
    try {
      const long = Array.from({ length: 4 }, () => d.client.exec(busy.id, { shell: 'sleep 3; echo ok' }));
      // Wait until the four are in flight.
      const end = Date.now() + 20_000 * TIME_SCALE;
      for (;;) {
        const m = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
        if (gauge(m, 'drums_fair_share_commands') >= 4 || Date.now() > end) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const r = await fetch(`${d.url}/v1/sessions/${busy.id}/exec`, {
        method: 'POST',
        headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ shell: 'echo one too many' }),
      });
      assert.equal(r.status, 429);
      assert.equal(r.headers.get('retry-after'), '1');
      const err = ((await r.json()) as { error: { code: string; message: string; details: { scope: string } } }).error;
      assert.deepEqual([err.code, err.details.scope], ['rate_limited', 'session']);
      assert.match(err.message, /wait for one to end/);
      // The other session's exec and the busy session's screenshot are served meanwhile.
      assert.equal((await d.client.exec(other.id, { shell: 'echo fine' })).stdout.trim(), 'fine');
      await d.client.screenshot(busy.id, 'png');
      for (const x of await Promise.all(long)) assert.equal(x.stdout.trim(), 'ok');
      assert.equal((await d.client.exec(busy.id, { shell: 'echo again' })).stdout.trim(), 'again');
    } finally {
      await d.client.destroySession(busy.id).catch(() => {});
      await d.client.destroySession(other.id).catch(() => {});
    }
  });
});
