import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// Cancellation: a client that goes away stops the action batch it started.
describe('an action batch whose client goes away (minimal image)', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'minimal' });
  });
  after(async () => {
    if (s) await d.client.destroySession(s.id).catch(() => {});
    await d.finish();
  });

  const cursor = async () => {
    const r = await d.client.act(s.id, { actions: [{ type: 'cursor_position' }] });
    const c = r.results[0]!.cursor!;
    return `${c.x},${c.y}`;
  };

  it('stops driving the display soon after the client aborts a 1000-action batch', async () => {
    await d.client.act(s.id, { actions: [{ type: 'move', x: 1, y: 1 }] });
    // 500 moves to distinct points, each followed by a 40 ms wait: about 20 s if it ran to the end.
    const actions = Array.from({ length: 1000 }, (_, i) => (i % 2 === 0 ? { type: 'move', x: 10 + i / 2, y: 10 + ((i / 2) % 300) } : { type: 'wait', ms: 40 }));
    const ac = new AbortController();
    const req = fetch(`${d.url}/v1/sessions/${s.id}/actions`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ actions }),
    }).catch((e: Error) => e);
    // Wait until the batch is visibly running, then go away.
    const deadline = Date.now() + 30_000;
    while ((await cursor()) === '1,1') {
      assert.ok(Date.now() < deadline, 'the batch never moved the pointer');
      await sleep(100);
    }
    ac.abort();
    assert.equal(((await req) as Error).name, 'AbortError');
    // The daemon notices the closed connection and stops at the next step (or cuts the wait short).
    await sleep(1000);
    const a = await cursor();
    await sleep(2000);
    const b = await cursor();
    assert.equal(b, a, 'the pointer kept moving after the client went away');
    assert.notEqual(a, `${10 + 499},${10 + (499 % 300)}`, 'the batch ran to its end');
  });

  it('kills an exec whose client goes away', async () => {
    const ac = new AbortController();
    const req = fetch(`${d.url}/v1/sessions/${s.id}/exec`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ argv: ['sleep', '47.5'], timeoutMs: 120_000 }),
    }).catch((e: Error) => e);
    // Every process's argv in the session, as the desktop user sees them.
    const sleepers = async () =>
      (await d.client.exec(s.id, { shell: 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "' })).stdout.split('sleep 47.5').length - 1;
    const deadline = Date.now() + 30_000;
    while ((await sleepers()) === 0) {
      assert.ok(Date.now() < deadline, 'the exec never started');
      await sleep(100);
    }
    ac.abort();
    assert.equal(((await req) as Error).name, 'AbortError');
    const gone = Date.now() + 10_000;
    while ((await sleepers()) > 0) {
      assert.ok(Date.now() < gone, 'the command still runs 10 s after its client went away');
      await sleep(200);
    }
  });

  const post = (path: string, body: unknown, signal: AbortSignal) =>
    fetch(`${d.url}${path}`, {
      method: 'POST',
      signal,
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    }).catch((e: Error) => e);

  it('undoes a create whose client goes away mid-way', async () => {
    const before = new Set((await d.client.listSessions()).map((x) => x.id));
    const ac = new AbortController();
    const req = post('/v1/sessions', { image: 'minimal', labels: { cancel: 'create' } }, ac.signal);
    // Abort as soon as the record exists (the first of its steps): the rest is still to run.
    let id: string | undefined;
    const deadline = Date.now() + 60_000;
    while (!id) {
      assert.ok(Date.now() < deadline, 'the create never started');
      id = (await d.client.listSessions()).find((x) => !before.has(x.id))?.id;
    }
    ac.abort();
    assert.equal(((await req) as Error).name, 'AbortError');
    const gone = Date.now() + 30_000;
    for (;;) {
      const now = (await d.client.listSessions()).find((x) => x.id === id);
      if (!now) break;
      assert.notEqual(now.state, 'ready', 'the create ran to its end after its client went away');
      assert.ok(Date.now() < gone, 'the cancelled create was not undone within 30 s');
      await sleep(50);
    }
  });

  it('stops a reset whose client goes away, leaving the session broken until a reset', async () => {
    const ac = new AbortController();
    const req = post(`/v1/sessions/${s.id}/reset`, {}, ac.signal);
    const deadline = Date.now() + 30_000;
    while ((await d.client.getSession(s.id)).state !== 'resetting') {
      assert.ok(Date.now() < deadline, 'the reset never started');
    }
    ac.abort();
    assert.equal(((await req) as Error).name, 'AbortError');
    const until = Date.now() + 30_000;
    let now = await d.client.getSession(s.id);
    while (now.state === 'resetting') {
      assert.ok(Date.now() < until, 'the cancelled reset did not stop within 30 s');
      await sleep(50);
      now = await d.client.getSession(s.id);
    }
    assert.equal(now.state, 'broken', `state ${now.state}`);
    assert.match(now.brokenReason ?? '', /reset cancelled: the caller went away/);
    s = await d.client.resetSession(s.id);
    assert.equal(s.state, 'ready');
  });

  it('a batch whose client stays runs to its end', async () => {
    const r = await d.client.act(s.id, {
      actions: [
        { type: 'move', x: 5, y: 5 },
        { type: 'wait', ms: 50 },
        { type: 'move', x: 7, y: 9 },
      ],
    });
    assert.equal(r.results.length, 3);
    assert.equal(await cursor(), '7,9');
  });
});
