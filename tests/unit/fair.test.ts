import { describe, it, mock } from 'node:test';
import assert from 'node:assert/strict';
import { Hono } from 'hono';
import { fairShare } from '../../src/api/request.ts';
import { FairScheduler } from '../../src/policy/fair-share.ts';

/**
 * Runs a test on a virtual clock (the scheduler's and the test's: setTimeout and Date are mocked): time
 * moves a millisecond at a time, and only after every promise that can move without it has moved. What
 * the scheduler sees (each request's time in its slot, who lingers) is then the same on a host at load
 * 40 as on an idle one; on the real clock a loaded host stretched a 10 ms request to hundreds, and the
 * flood's share with it ("flood starved").
 */
async function virtually(body: (now: () => number) => Promise<void>): Promise<void> {
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  try {
    let settled = false;
    const done = body(() => Date.now()).finally(() => {
      settled = true;
    });
    done.catch(() => {});
    for (let ms = 0; !settled; ms++) {
      // A few turns of the event loop settle every chain of promises and setImmediate the test runs now.
      for (let i = 0; i < 4 && !settled; i++) await new Promise((r) => setImmediate(r));
      if (settled) break;
      assert.ok(ms < 600_000, 'the test did not end within 10 virtual minutes');
      mock.timers.tick(1);
    }
    await done;
  } finally {
    mock.timers.reset();
  }
}

describe('fair share between sessions', () => {
  it('a flood on one session waits in its own queue: others are served in turn', () =>
    virtually(async (now) => {
      const sched = new FairScheduler({ slots: 1, maxQueue: 100, now });
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
    }));

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

  it('a flood over many connections gets one slot at a time while others are active, so closed-loop clients keep their pace', () =>
    virtually(async (now) => {
      const sched = new FairScheduler({ slots: 4, maxQueue: 100, now });
      const order: string[] = [];
      let floodRunning = 0,
        floodStarts = 0,
        floodPeakAfterFirst = 0,
        othersActive = 0;
      const tick = () => new Promise((r) => setImmediate(r));
      const flood = Array.from({ length: 40 }, () =>
        sched.run('flood', async () => {
          floodRunning++;
          if (++floodStarts > 4 && othersActive) floodPeakAfterFirst = Math.max(floodPeakAfterFirst, floodRunning);
          order.push('f');
          await tick();
          floodRunning--;
        }),
      );
      // Three clients in a closed loop, 6 requests each, one at a time.
      const client = async (who: string) => {
        othersActive++;
        for (let i = 0; i < 6; i++)
          await sched.run(who, async () => {
            order.push(who);
            await tick();
            if (i === 5) othersActive--; // before its slot is handed on
          });
      };
      await Promise.all([...flood, client('a'), client('b'), client('c')]);
      // The flood started alone with every slot; after its first 4, it ran one at a time.
      assert.equal(order.slice(0, 4).join(''), 'ffff');
      assert.ok(floodPeakAfterFirst <= 1, order.join(''));
      // The clients' 18 requests are served within the first 4 + 18 × 2 starts (the flood gets about one in four).
      const lastClient = Math.max(...['a', 'b', 'c'].map((w) => order.lastIndexOf(w)));
      assert.ok(lastClient < 4 + 18 * 2, order.join(''));
      assert.equal(order.filter((x) => x === 'f').length, 40);
    }));

  it('a backlogged session is paced to the least-served active one: a flood gets about what each closed-loop client gets, even with slots free', () =>
    virtually(async (now) => {
      const sched = new FairScheduler({ slots: 4, maxQueue: 100, lingerMs: 200, leadMs: 5, now });
      const work = () => new Promise((r) => setTimeout(r, 10));
      const done: Record<string, number> = { f: 0, a: 0, b: 0 };
      let stop = false;
      // 8 connections on one id, each sending again as soon as it is answered.
      const flood = Array.from({ length: 8 }, async () => {
        while (!stop) await sched.run('f', async () => (await work(), done.f!++));
      });
      // Two well-behaved clients: one request at a time, with a short gap (well under lingerMs) between.
      const client = async (who: string) => {
        for (let i = 0; i < 15; i++) {
          await sched.run(who, async () => (await work(), done[who]!++));
          await new Promise((r) => setTimeout(r, 2));
        }
      };
      await Promise.all([client('a'), client('b')]);
      const during = done.f!;
      stop = true;
      await Promise.all(flood);
      // Without the pacing the flood took every slot the clients left (about 3 × theirs).
      assert.ok(during <= 15 + 6, `flood ran ${during} while each client ran 15`);
      assert.ok(during >= 5, `flood starved: ${during}`);
    }));

  it('a flood of cheap requests is charged a turn each: it gets about as many requests as each client, not as much slot time', () =>
    virtually(async (now) => {
      const sched = new FairScheduler({ slots: 4, maxQueue: 100, lingerMs: 200, now });
      const done: Record<string, number> = { f: 0, a: 0, b: 0 };
      let stop = false;
      // The flood's requests take no time in the slot (a cached frame); the clients' take 10 ms.
      const flood = Array.from({ length: 8 }, async () => {
        while (!stop) await sched.run('f', async () => (await new Promise((r) => setImmediate(r)), done.f!++));
      });
      const client = async (who: string) => {
        for (let i = 0; i < 15; i++) {
          await sched.run(who, async () => (await new Promise((r) => setTimeout(r, 10)), done[who]!++));
          await new Promise((r) => setTimeout(r, 2));
        }
      };
      await Promise.all([client('a'), client('b')]);
      const during = done.f!;
      stop = true;
      await Promise.all(flood);
      // (A client's request charged more than a turn on a loaded host lets the flood run ahead by that much; with no turn charged it ran hundreds.)
      assert.ok(during <= 2 * 15 + 4, `flood ran ${during} while each client ran 15`);
      assert.ok(during >= 5, `flood starved: ${during}`);
    }));

  it('a request sent behind another of its session (a backlog) is charged backlogCharge turns: a flood gets a quarter of what each client gets', () =>
    virtually(async (now) => {
      /** The flood's requests served while two clients each make 30, one at a time. */
      const floodWhile = async (opts: { backlogCharge?: number }) => {
        const sched = new FairScheduler({ slots: 4, maxQueue: 100, lingerMs: 200, now, ...opts });
        const done: Record<string, number> = { f: 0, a: 0, b: 0 };
        let stop = false;
        const flood = Array.from({ length: 8 }, async () => {
          while (!stop)
            await sched.run('f', async () => {
              await new Promise((r) => setImmediate(r));
              done.f!++;
            });
        });
        const client = async (who: string) => {
          for (let i = 0; i < 30; i++) {
            await sched.run(who, async () => {
              await new Promise((r) => setTimeout(r, 10));
              done[who]!++;
            });
            await new Promise((r) => setTimeout(r, 2));
          }
        };
        await Promise.all([client('a'), client('b')]);
        const during = done.f!;
        stop = true;
        await Promise.all(flood);
        return during;
      };
      const charged = await floodWhile({});
      const oneTurn = await floodWhile({ backlogCharge: 1 });
      assert.ok(charged <= 30 / 4 + 4 && charged >= 4, `the flood ran ${charged} while each client ran 30`);
      assert.ok(oneTurn >= 20, `at one turn a backlog request the flood ran ${oneTurn} (about a client's 30)`);
    }));

  it('a client that sends one request at a time is never refused while another session floods past its queue bound; idle sessions are forgotten', () =>
    virtually(async (now) => {
      const sched = new FairScheduler({ slots: 2, maxQueue: 3, lingerMs: 20, now });
      const work = () => new Promise((r) => setTimeout(r, 5));
      let refused = 0;
      let stop = false;
      const flood = Array.from({ length: 12 }, async () => {
        while (!stop) {
          try {
            await sched.run('f', work);
          } catch (e) {
            assert.equal((e as { code?: string }).code, 'rate_limited');
            assert.match((e as Error).message, /one request at a time/);
            refused++;
            await new Promise((r) => setTimeout(r, 5));
          }
        }
      });
      for (let i = 0; i < 20; i++) await sched.run('good', work);
      stop = true;
      await Promise.all(flood);
      assert.ok(refused > 0, 'the flood was never refused');
      assert.equal(sched.waiting('f'), 0);
      await new Promise((r) => setTimeout(r, 50));
      await sched.run('other', async () => {});
      assert.equal(sched.lanes, 1, 'lanes of idle sessions are kept past lingerMs');
    }));

  it('commands take no slot but are bounded per session: one over maxQueue is refused, the others and other sessions go on', async () => {
    const sched = new FairScheduler({ slots: 1, maxQueue: 2 });
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const long = [sched.bounded('a', () => gate), sched.bounded('a', () => gate)];
    await assert.rejects(
      sched.bounded('a', async () => {}),
      (e: Error & { code: string; details: { scope: string } }) => e.code === 'rate_limited' && e.details.scope === 'session',
    );
    // Another session's command, and a's own observe request (the one slot), are not held by them.
    await sched.bounded('b', async () => {});
    await sched.run('a', async () => {});
    assert.equal(sched.stats().commands, 2);
    release();
    await Promise.all(long);
    assert.equal(sched.stats().commands, 0);
    await sched.bounded('a', async () => {});
  });

  it('a malformed escape in the session id reaches the route (no URIError, no 500)', async () => {
    const app = new Hono();
    app.use('/v1/sessions/:id/*', fairShare(new FairScheduler({ slots: 2, maxQueue: 4 })));
    app.post('/v1/sessions/:id/actions', (c) => c.json({ error: { code: 'session_not_found' } }, 404));
    for (const id of ['%ff', '%', '%00', 'a%2Fb']) {
      const r = await app.request(`/v1/sessions/${id}/actions`, { method: 'POST' });
      assert.equal(r.status, 404, id);
    }
  });
});
