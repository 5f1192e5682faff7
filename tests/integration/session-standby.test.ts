import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { residue, startDaemon, TIME_SCALE, type TestDaemon, killDaemon } from '../helpers.ts';

// A reset served by a standby (src/session/standby.ts, docs/pools.md "Standbys"): the session keeps
// its id and OSWorld endpoint, its generation goes up, nothing of the earlier attempt is left, the
// standby is made again, and destroy or a daemon restart leave nothing behind.

type View = {
  id: string;
  state: string;
  generation: number;
  attempt: { generation: number; token: string };
  network: { address: string };
  timings: Record<string, number>;
  osworld?: { serverPort: number; chromiumPort: number; address: string };
  standbys?: { target: number; ready: number; making: number; lastError?: string };
};

describe('reset by standby', () => {
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    d = await startDaemon();
    env = { DRUMS_STATE_DIR: d.stateDir, DRUMS_INSTANCE: d.instance, DRUMS_TOKEN: d.token };
  });
  after(async () => {
    await d.finish();
  });

  const get = async (id: string) => (await d.client.getSession(id)) as unknown as View;
  /** Polls until `ok` holds (a standby boots in seconds; at load 20+ in tens of them). */
  const until = async <T>(what: string, f: () => Promise<T>, ok: (x: T) => boolean, ms = 180_000 * TIME_SCALE): Promise<T> => {
    const end = Date.now() + ms;
    for (;;) {
      const x = await f();
      if (ok(x)) return x;
      assert.ok(Date.now() < end, `${what}: still ${JSON.stringify(x)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  /** The host objects of exactly `n` sessions (the session and its standbys), with user namespaces. */
  const objects = () => {
    const r = residue(d.instance, d.stateDir);
    return {
      netns: r.netns.length,
      links: r.links.length,
      containers: r.containers.length,
      sessionDirs: r.sessionDirs.length,
      cgroups: new Set(r.cgroups.map((c) => c.split('/').pop())).size,
      claims: r.claims.length,
      loops: r.loops.length,
    };
  };
  const of = (n: number) => ({ netns: n, links: n, containers: n, sessionDirs: n, cgroups: n, claims: 2 * n, loops: n });
  const osw = (v: View, path: string, init?: RequestInit) => fetch(`http://127.0.0.1:${v.osworld!.serverPort}${path}`, init);
  const runInGuest = async (v: View, command: string[]) => {
    const r = await osw(v, '/execute', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command, shell: false }) });
    assert.equal(r.status, 200);
    return (await r.json()) as { status: string; output: string; returncode: number };
  };

  let id = '';
  it('swaps a standby in: same id and endpoint, generation + 1, nothing of the earlier attempt, the standby made again', async () => {
    const created = (await d.client.createSession({
      image: 'default',
      standbys: 1,
      record: true,
      labels: { 'drums.osworld': '1' },
    } as never)) as unknown as View;
    id = created.id;
    assert.ok(created.osworld, 'the session has an OSWorld endpoint');
    assert.deepEqual(created.standbys?.target, 1);
    // The standby is hidden from clients.
    assert.deepEqual(
      (await d.client.listSessions()).map((s) => s.id),
      [id],
    );
    await until(
      'the standby is ready',
      () => get(id),
      (v) => v.standbys?.ready === 1,
    );
    assert.deepEqual(objects(), of(2));
    // Something the attempt wrote, in the home directory and in /tmp.
    await d.client.exec(id, { shell: 'echo touched > /home/user/marker && echo touched > /tmp/marker' });
    const r = (await d.client.resetSession(id)) as unknown as View;
    assert.equal(r.id, id);
    assert.equal(r.state, 'ready');
    assert.equal(r.generation, created.generation + 1);
    assert.equal(r.attempt.generation, r.generation);
    assert.notEqual(r.attempt.token, created.attempt.token);
    assert.ok('reset.standbyMs' in r.timings, `served by the standby: ${JSON.stringify(r.timings)}`);
    assert.ok(!('reset.stopMs' in r.timings), 'no boot in the reset');
    assert.deepEqual(r.osworld, created.osworld, 'the same OSWorld endpoint');
    // Nothing the earlier attempt wrote is there.
    for (const f of ['/home/user/marker', '/tmp/marker']) assert.equal((await d.client.exec(id, { argv: ['cat', f] })).exitCode, 1, `${f} survived the reset`);
    // The endpoint answers from the new generation, which knows itself by the session's id.
    const shot = await osw(r, '/screenshot');
    assert.equal(shot.status, 200);
    assert.ok((await shot.arrayBuffer()).byteLength > 1000);
    const host = await runInGuest(r, ['cat', '/etc/hostname']);
    assert.equal(host.output.trim(), id);
    const env = await runInGuest(r, ['sh', '-c', 'tr "\\0" "\\n" < /proc/1/environ | grep ^DRUMS_SESSION_ID=']);
    assert.equal(env.output.trim(), `DRUMS_SESSION_ID=${id}`);
    // The screenshot route of the API follows too (the display service reconnects per generation).
    assert.ok((await d.client.screenshot(id)).length > 1000);
    // The episode of the earlier attempt closed at the reset; the new one records the new generation's calls.
    const eps = await until(
      'the episodes',
      () => d.client.listEpisodes(id),
      (e) => (e.find((x) => x.generation === r.generation)?.steps ?? 0) >= 2,
      60_000 * TIME_SCALE,
    );
    const old = eps.find((x) => x.generation === created.generation);
    assert.equal(old?.closeReason, 'reset');
    assert.equal(eps.find((x) => x.generation === r.generation)?.closedAt, null);
    // The standby is made again, and the old generation's objects go: again one session and one standby.
    await until(
      'a new standby is ready',
      () => get(id),
      (v) => v.standbys?.ready === 1,
    );
    await until(
      'the old generation is recycled',
      async () => objects(),
      (o) => JSON.stringify(o) === JSON.stringify(of(2)),
    );
  });

  it('a reset with no standby ready boots as before', async () => {
    // The first reset takes the standby; the second comes before a new one can be ready.
    const a = (await d.client.resetSession(id)) as unknown as View;
    assert.ok('reset.standbyMs' in a.timings);
    const b = (await d.client.resetSession(id)) as unknown as View;
    assert.equal(b.generation, a.generation + 1);
    assert.ok('reset.stopMs' in b.timings && !('reset.standbyMs' in b.timings), JSON.stringify(b.timings));
    await until(
      'a new standby is ready',
      () => get(id),
      (v) => v.standbys?.ready === 1 && v.standbys.making === 0,
    );
    await until(
      'only the session and its standby are left',
      async () => objects(),
      (o) => JSON.stringify(o) === JSON.stringify(of(2)),
    );
  });

  it('a daemon killed and restarted adopts the session in its new slot, sweeps the standby and makes a new one', async () => {
    const before = (await d.client.resetSession(id)) as unknown as View;
    assert.ok('reset.standbyMs' in before.timings);
    // Killed at once: the old generation may still be being recycled.
    await killDaemon(d);
    d = await startDaemon(env);
    const v = await get(id);
    assert.equal(v.state, 'ready');
    assert.equal(v.generation, before.generation);
    assert.equal(v.attempt.token, before.attempt.token);
    assert.equal((await d.client.exec(id, { argv: ['cat', '/etc/hostname'] })).stdout.trim(), id);
    await until(
      'a new standby is ready',
      () => get(id),
      (x) => x.standbys?.ready === 1,
    );
    assert.deepEqual(objects(), of(2));
    // The endpoint is made anew for an adopted session, and answers.
    assert.equal((await osw(v, '/screenshot')).status, 200);
    const r = (await d.client.resetSession(id)) as unknown as View;
    assert.ok('reset.standbyMs' in r.timings);
  });

  it('destroy takes the standbys and the recycling with it: nothing is left', async () => {
    await d.client.destroySession(id);
    assert.deepEqual(objects(), of(0));
    const r = residue(d.instance, d.stateDir);
    assert.deepEqual(r.procs, []);
    assert.deepEqual(r.mounts, []);
    assert.ok(!existsSync(join(d.stateDir, 'sessions', id)));
  });
});
