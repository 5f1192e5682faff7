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
    const actions = Array.from({ length: 1000 }, (_, i) => (i % 2 === 0 ? { type: 'move', x: 10 + i / 2, y: 10 + (i / 2) % 300 } : { type: 'wait', ms: 40 }));
    const ac = new AbortController();
    const req = fetch(`${d.url}/v1/sessions/${s.id}/actions`, {
      method: 'POST', signal: ac.signal,
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
    assert.equal((await req as Error).name, 'AbortError');
    // The daemon notices the closed connection and stops at the next step (or cuts the wait short).
    await sleep(1000);
    const a = await cursor();
    await sleep(2000);
    const b = await cursor();
    assert.equal(b, a, 'the pointer kept moving after the client went away');
    assert.notEqual(a, `${10 + 499},${10 + (499 % 300)}`, 'the batch ran to its end');
  });

  it('a batch whose client stays runs to its end', async () => {
    const r = await d.client.act(s.id, { actions: [{ type: 'move', x: 5, y: 5 }, { type: 'wait', ms: 50 }, { type: 'move', x: 7, y: 9 }] });
    assert.equal(r.results.length, 3);
    assert.equal(await cursor(), '7,9');
  });
});
