import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiError, startDaemon, type TestDaemon } from '../helpers.ts';

/** Polls until cond() holds or the deadline passes (no fixed sleeps). */
async function until<T>(what: string, f: () => Promise<T>, cond: (v: T) => boolean, ms = 120_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (cond(v)) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

// Warm pools on the `minimal` image: config, claims (hit, miss, empty), release, bad input, metrics.
describe('warm pools', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_POOLS: JSON.stringify({ mini: { size: 2, template: { image: 'minimal', labels: { team: 'rl' } } } }) });
  });
  after(async () => {
    await d.finish();
  });

  it('fills a configured pool in the background; ready sessions are invisible until claimed', async () => {
    const p = await until(
      'pool mini to fill',
      () => d.client.getPool('mini'),
      (v) => v.ready === 2,
    );
    assert.equal(p.source, 'config');
    assert.equal(p.size, 2);
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('a claim returns a ready session with a fresh attempt, and a reset release returns it clean', async () => {
    const s = await d.client.claimSession({ pool: 'mini', labels: { run: 'a' } });
    try {
      assert.equal(s.poolHit, true);
      assert.equal(s.state, 'ready');
      assert.equal(s.generation, 1);
      assert.match(s.attempt.token, /^[0-9a-f-]{36}$/);
      assert.deepEqual(s.labels, { team: 'rl', run: 'a', 'drums.pool': 'mini' });
      assert.deepEqual(
        (await d.client.listSessions()).map((x) => x.id),
        [s.id],
      );
      assert.equal((await d.client.exec(s.id, { argv: ['id', '-u'] })).stdout.trim(), '1000');
      await d.client.exec(s.id, { shell: 'echo secret > /home/user/marker' });
      const r = await d.client.releaseSession(s.id, { mode: 'reset' });
      assert.deepEqual([r.id, r.pool, r.mode], [s.id, 'mini', 'reset']);
      if (!r.returned) return; // a refill filled the pool first; nothing more to see of this session
      // Released: invisible again, and when claimed anew nothing of the first user survives.
      assert.ok(!(await d.client.listSessions()).some((x) => x.id === s.id));
      const seen = new Set<string>();
      let again: Awaited<ReturnType<typeof d.client.claimSession>> | undefined;
      for (let i = 0; i < 3 && !again; i++) {
        const c = await d.client.claimSession({ pool: 'mini' });
        seen.add(c.id);
        if (c.id === s.id) again = c;
      }
      try {
        if (again) {
          assert.equal(again.generation, 2);
          assert.notEqual(again.attempt.token, s.attempt.token);
          assert.deepEqual(again.labels, { team: 'rl', 'drums.pool': 'mini' });
          assert.notEqual((await d.client.exec(again.id, { argv: ['cat', '/home/user/marker'] })).exitCode, 0);
          // The first user's attempt is stale.
          const stale = await apiError(d.client.request('GET', `/v1/sessions/${s.id}?generation=1`));
          assert.equal(stale.code, 'stale_generation');
        }
      } finally {
        for (const id of seen) await d.client.releaseSession(id, { mode: 'destroy' });
      }
    } finally {
      await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('an empty pool answers 429 pool_empty or makes a fresh session, as the claim asks', async () => {
    const p = await d.client.putPool('empty', { size: 0, template: { image: 'minimal' } });
    assert.deepEqual([p.name, p.size, p.ready, p.source], ['empty', 0, 0, 'api']);
    const e = await apiError(d.client.claimSession({ pool: 'empty', onEmpty: 'fail' }));
    assert.deepEqual([e.status, e.code], [429, 'pool_empty']);
    const s = await d.client.claimSession({ pool: 'empty' });
    try {
      assert.equal(s.poolHit, false);
      assert.equal(s.state, 'ready');
      assert.equal(s.labels['drums.pool'], 'empty');
    } finally {
      const r = await d.client.releaseSession(s.id, { mode: 'reset' });
      assert.equal(r.returned, false); // size 0: destroyed
    }
    const v = await d.client.getPool('empty');
    assert.deepEqual([v.claims, v.hits, v.misses], [2, 0, 1]);
    await d.client.deletePool('empty');
    assert.equal((await apiError(d.client.getPool('empty'))).code, 'pool_not_found');
  });

  it('a create whose spec equals a pool template is served from the pool', async () => {
    await until(
      'pool mini to refill',
      () => d.client.getPool('mini'),
      (v) => v.ready >= 1,
    );
    const res = await d.client.request('POST', '/v1/sessions', { image: 'minimal', labels: { team: 'rl' } });
    const s = (await res.json()) as { id: string; labels: Record<string, string> };
    try {
      assert.equal(res.status, 201);
      assert.equal(res.headers.get('x-drums-pool'), 'mini; hit');
      assert.equal(s.labels['drums.pool'], 'mini');
    } finally {
      await d.client.destroySession(s.id);
    }
    // Another spec is an ordinary create.
    const plain = await d.client.request('POST', '/v1/sessions', { image: 'minimal' });
    const ps = (await plain.json()) as { id: string };
    assert.equal(plain.headers.get('x-drums-pool'), null);
    const notPooled = await apiError(d.client.releaseSession(ps.id));
    assert.deepEqual([notPooled.status, notPooled.code], [409, 'session_not_pooled']);
    await d.client.destroySession(ps.id);
  });

  it('refuses bad pools and claims with stable codes, making nothing', async () => {
    const cases: [() => Promise<unknown>, number, string][] = [
      [() => d.client.claimSession({ pool: 'nope' }), 404, 'pool_not_found'],
      [() => d.client.claimSession({ pool: 'mini', image: 'default' } as never), 400, 'invalid_spec'],
      [() => d.client.claimSession({ pool: 'mini', onEmpty: 'later' } as never), 400, 'invalid_spec'],
      [() => d.client.claimSession({ pool: 'mini', labels: { 'drums.pool': 'x' } }), 400, 'invalid_spec'],
      [() => d.client.putPool('bad', { size: 1, template: { image: 'no-such-image' } }), 404, 'image_not_found'],
      [() => d.client.putPool('bad', { size: -1 }), 400, 'invalid_pool'],
      [() => d.client.putPool('bad', { size: 1, template: { screen: '10x10' } }), 400, 'invalid_pool'],
      [() => d.client.putPool('bad', { size: 1, extra: 1 } as never), 400, 'invalid_pool'],
      [() => d.client.putPool('Bad Name', { size: 1 }), 400, 'invalid_pool'],
      [() => d.client.deletePool('nope'), 404, 'pool_not_found'],
    ];
    for (const [p, status, code] of cases) {
      const e = await apiError(p());
      assert.deepEqual([e.status, e.code], [status, code], e.message);
    }
    assert.deepEqual(
      (await d.client.listPools()).map((p) => p.name),
      ['mini'],
    );
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('a task pool takes members from its filler, is never filled or served to a plain create, and refuses what cannot run', async () => {
    // The daemon's side of a pool of set-up tasks (docs/pools.md); the SDK's filler and the OSWorld
    // setup are tested end to end in sdk/python/tests/test_osworld_pool.py.
    type Added = { status: number; code?: string; body: { ready?: number; fill?: Record<string, number> } };
    const add = async (pool: string, session: string, origin = 'setup'): Promise<Added> => {
      try {
        const r = await d.client.request('POST', `/v1/pools/${pool}/members`, { session, origin });
        return { status: r.status, code: undefined, body: (await r.json()) as { ready?: number; fill?: Record<string, number> } };
      } catch (e) {
        const err = await apiError(Promise.reject(e));
        return { status: err.status, code: err.code, body: {} };
      }
    };
    const task = { id: 'probe-task', digest: 'ab'.repeat(16), apps: ['sh'], internet: null };
    const template = { image: 'minimal', labels: { kind: 'task' } };
    // An app the image lacks, the internet without egress: 422 task_not_runnable naming why.
    const noApp = await apiError(d.client.putPool('tp-bad', { size: 1, template, task: { ...task, apps: ['gimp'] } } as never));
    const why = (e: { details?: unknown }) => (e.details ?? {}) as { reason?: string; missing?: string[] };
    assert.deepEqual([noApp.status, noApp.code, why(noApp).reason, why(noApp).missing], [422, 'task_not_runnable', 'app_missing', ['gimp']]);
    const web = await apiError(d.client.putPool('tp-bad', { size: 1, template, task: { ...task, internet: 'opens a page' } } as never));
    assert.deepEqual([web.status, web.code, why(web).reason], [422, 'task_not_runnable', 'needs_internet']);
    const badApp = await apiError(d.client.putPool('tp-bad', { size: 1, template, task: { ...task, apps: ['../../bin/sh'] } } as never));
    assert.deepEqual([badApp.status, badApp.code], [400, 'invalid_pool']);

    const view = (await (await d.client.request('PUT', '/v1/pools/tp', { size: 1, template, task })).json()) as Record<string, unknown>;
    assert.deepEqual([view.filler, view.ready, view.creating], ['client', 0, 0]);
    const s = await d.client.createSession(template); // a plain create of its template: not from the task pool
    let claimedId: string | undefined;
    try {
      assert.equal(s.labels['drums.pool'], undefined);
      assert.equal((await d.client.getPool('tp')).creating, 0, 'the daemon does not fill a task pool');
      assert.equal((await add('mini', s.id)).code, 'invalid_request'); // a template pool takes no members
      assert.equal((await add('tp', s.id, 'copied')).code, 'invalid_request');
      const other = await d.client.createSession({ image: 'minimal', labels: { kind: 'task' }, egress: true });
      try {
        assert.equal((await add('tp', other.id)).code, 'invalid_request'); // not the template's spec
      } finally {
        await d.client.destroySession(other.id);
      }
      await d.client.request('PUT', '/v1/pools/tp', { size: 0, template, task });
      assert.deepEqual([(await add('tp', s.id)).status, (await add('tp', s.id)).code], [409, 'pool_full']);
      await d.client.request('PUT', '/v1/pools/tp', { size: 1, template, task });
      const added = await add('tp', s.id, 'fork-disk');
      assert.deepEqual([added.status, added.body.ready, added.body.fill], [200, 1, { setup: 0, forkDisk: 1, forkMemory: 0 }]);
      assert.equal((await apiError(d.client.getSession(s.id))).code, 'session_not_found'); // hidden like any member
      assert.equal((await add('tp', s.id)).code, 'session_not_found');
      const c = await d.client.claimSession({ pool: 'tp', onEmpty: 'fail' });
      claimedId = c.id;
      assert.equal(c.id, s.id);
      assert.equal((await add('tp', c.id)).code, 'invalid_request'); // came from a pool
      // Empty: even onEmpty create is 429 (the daemon cannot set a task up); a release destroys.
      assert.equal((await apiError(d.client.claimSession({ pool: 'tp' }))).code, 'pool_empty');
      assert.equal((await d.client.releaseSession(c.id, { mode: 'reset' })).returned, false);
      claimedId = undefined;
    } finally {
      if (claimedId) await d.client.destroySession(claimedId);
      await d.client.deletePool('tp');
    }
    await until(
      'the task pool member to be destroyed',
      () => d.client.listSessions(),
      (v) => v.length === 0,
    );
  });

  it('shows claims, fill and refill latency in /metrics', async () => {
    const text = await (await d.client.request('GET', '/metrics')).text();
    assert.match(text, /drums_pool_claims_total\{pool="mini",result="hit"\} [1-9]/);
    assert.match(text, /drums_pool_claims_total\{pool="empty",result="empty"\} 1/);
    assert.match(text, /drums_pool_claims_total\{pool="empty",result="miss"\} 1/);
    assert.match(text, /drums_pool_refill_seconds_count\{pool="mini"\} [1-9]/);
    assert.match(text, /drums_pool_target\{pool="mini"\} 2/);
    assert.match(text, /drums_pool_sessions\{pool="mini",state="ready"\} \d/);
    assert.match(text, /drums_op_duration_seconds_count\{op="claim"\} [1-9]/);
  });

  it('shrinking a pool destroys its surplus ready sessions', async () => {
    await d.client.putPool('mini', { size: 0, template: { image: 'minimal', labels: { team: 'rl' } } });
    const p = await until(
      'pool mini to empty',
      () => d.client.getPool('mini'),
      (v) => v.ready === 0 && v.creating === 0,
    );
    assert.equal(p.size, 0);
  });

  it('a draining host refills no pool, claims and forks nothing, and fills again when the drain is cancelled', async () => {
    await d.client.drainHost();
    try {
      await d.client.putPool('drain', { size: 1, template: { image: 'minimal' } });
      // Nothing is made while draining: the pool stays empty over a few refill rounds.
      const end = Date.now() + 3000;
      while (Date.now() < end) {
        const p = await d.client.getPool('drain');
        assert.deepEqual([p.ready, p.creating], [0, 0], 'a pool refilled while the host drains');
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.equal((await apiError(d.client.claimSession({ pool: 'drain', onEmpty: 'create' }))).code, 'host_draining');
      assert.equal((await apiError(d.client.forkSession('s0123456789', { count: 1 }))).code, 'host_draining');
    } finally {
      await d.client.undrainHost();
    }
    await until(
      'pool drain to fill after the drain',
      () => d.client.getPool('drain'),
      (v) => v.ready === 1,
    );
    await d.client.deletePool('drain');
  });
});

// Pools made or changed through the API are saved in the state dir and come back after a restart.
describe('warm pools across a daemon restart', () => {
  const config = JSON.stringify({ cfg: { size: 0, template: { image: 'minimal', labels: { from: 'config' } } } });
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  const restart = async () => {
    await d.stop();
    d = await startDaemon(env);
  };
  before(async () => {
    d = await startDaemon({ DRUMS_POOLS: config });
    env = { DRUMS_POOLS: config, DRUMS_STATE_DIR: d.stateDir, DRUMS_INSTANCE: d.instance, DRUMS_TOKEN: d.token };
  });
  after(async () => {
    await d.finish();
  });

  const byName = async () => Object.fromEntries((await d.client.listPools()).map((p) => [p.name, p]));

  it('PUT and DELETE persist; a saved pool wins over the config pool of its name and refills', async () => {
    await d.client.putPool('kept', { size: 1, template: { image: 'minimal', labels: { k: 'v' } } });
    await d.client.putPool('cfg', { size: 0, template: { image: 'minimal', labels: { from: 'api' } } });
    await d.client.putPool('gone', { size: 0, template: { image: 'minimal' } });
    await d.client.deletePool('gone');
    assert.deepEqual(Object.keys(JSON.parse(readFileSync(join(d.stateDir, 'pools.json'), 'utf8'))).sort(), ['cfg', 'kept']);
    await restart();
    const pools = await byName();
    assert.deepEqual(Object.keys(pools).sort(), ['cfg', 'kept']);
    assert.equal(pools.kept!.source, 'api');
    assert.equal(pools.kept!.size, 1);
    assert.deepEqual(pools.kept!.template, { image: 'minimal', labels: { k: 'v' } });
    assert.equal(pools.cfg!.source, 'api');
    assert.deepEqual(pools.cfg!.template.labels, { from: 'api' });
    await until(
      'restored pool kept to refill',
      () => d.client.getPool('kept'),
      (v) => v.ready === 1,
    );
    const s = await d.client.claimSession({ pool: 'kept', onEmpty: 'fail' });
    try {
      assert.equal(s.poolHit, true);
      assert.equal(s.labels.k, 'v');
    } finally {
      await d.client.destroySession(s.id);
    }
    // Deleting a restored pool is saved too; the config's pool of a name comes back once the API's is gone.
    await d.client.deletePool('kept');
    await d.client.deletePool('cfg');
    await restart();
    const after = await byName();
    assert.deepEqual(Object.keys(after), ['cfg']);
    assert.equal(after.cfg!.source, 'config');
    assert.deepEqual(after.cfg!.template.labels, { from: 'config' });
  });

  it('a corrupt pools file is moved aside and the daemon starts with the config pools', async () => {
    await d.stop();
    const file = join(d.stateDir, 'pools.json');
    writeFileSync(file, '{"kept": {"size": 1, ');
    d = await startDaemon(env);
    assert.deepEqual(
      (await d.client.listPools()).map((p) => [p.name, p.source]),
      [['cfg', 'config']],
    );
    assert.equal(existsSync(file), false);
    assert.equal(readFileSync(`${file}.corrupt`, 'utf8'), '{"kept": {"size": 1, ');
    // The next API change writes a good file again.
    await d.client.putPool('again', { size: 0, template: { image: 'minimal' } });
    assert.deepEqual(Object.keys(JSON.parse(readFileSync(file, 'utf8'))), ['again']);
  });
});
