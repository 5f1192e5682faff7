import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FairScheduler } from '../../src/api/middleware/fair.ts';

describe('fair share between sessions', () => {
  it('a flood on one session waits in its own queue: others are served in turn', async () => {
    const sched = new FairScheduler({ slots: 1, maxQueue: 100 });
    const order: string[] = [];
    const job = (who: string) =>
      sched.run(who, async () => {
        order.push(who);
        await new Promise((r) => setImmediate(r));
      });
    const flood = Array.from({ length: 10 }, () => job('a'));
    const others = [job('b'), job('c')];
    await Promise.all([...flood, ...others]);
    // a's first request was running; b and c each wait for at most one more of a's.
    assert.ok(order.indexOf('b') <= 2 && order.indexOf('c') <= 3, order.join(''));
    assert.equal(order.filter((x) => x === 'a').length, 10);
  });

  it('is work-conserving (a lone session gets every slot) and refuses a session over its queue bound', async () => {
    const sched = new FairScheduler({ slots: 3, maxQueue: 2 });
    let running = 0,
      peak = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const job = () =>
      sched.run('a', async () => {
        running++;
        peak = Math.max(peak, running);
        await gate;
        running--;
      });
    const jobs = [job(), job(), job(), job(), job()];
    const refused = job();
    await assert.rejects(refused, (e: Error & { code: string }) => e.code === 'rate_limited');
    await new Promise((r) => setImmediate(r));
    assert.equal(peak, 3);
    release();
    await Promise.all(jobs);
  });
});
