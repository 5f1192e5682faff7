import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SessionInfo } from '../../src/client/client.ts';
import { apiError, startDaemon, type TestDaemon, killDaemon } from '../helpers.ts';

// One recorded session (minimal image, OSWorld endpoint by label) through API and guest calls, a reset, an
// outcome, an export, a daemon kill -9 and restart, and its quota; one unrecorded session beside it.
describe('episodes', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  let plain: SessionInfo;
  const out = mkdtempSync(join(tmpdir(), 'drums-episodes-export-'));
  let env: NodeJS.ProcessEnv;
  before(async () => {
    // A small session quota, so the quota is reached in a few batches.
    d = await startDaemon({ DRUMS_EPISODE_SESSION_MB: '1' });
    // After the restart the instance's store is 1 MiB too: the session's quota fills it, and a new recorded session is refused.
    env = { DRUMS_EPISODE_SESSION_MB: '1', DRUMS_EPISODE_MAX_MB: '1', DRUMS_STATE_DIR: d.stateDir, DRUMS_INSTANCE: d.instance, DRUMS_TOKEN: d.token };
    [s, plain] = await Promise.all([
      d.client.createSession({ image: 'minimal', labels: { 'drums.osworld': '1' }, record: { frames: 30, a11y: true } }),
      d.client.createSession({ image: 'minimal' }),
    ]);
  });
  after(async () => {
    rmSync(out, { recursive: true, force: true });
    await d.finish();
  });

  it('a recorded session says so; an unrecorded one has no recording and no episodes', async () => {
    assert.deepEqual(s.recording, { frames: 30, a11y: true, generation: 1, stopped: null });
    assert.equal(plain.recording, undefined);
    assert.deepEqual(await d.client.listEpisodes(plain.id), []);
    assert.equal((await apiError(d.client.listEpisodes('s0000000000'))).code, 'session_not_found');
  });

  it('records API actions and observations and OSWorld guest calls, and serves them as events and steps', async () => {
    const shot0 = await d.client.screenshot(s.id);
    await d.client.act(s.id, { actions: [{ type: 'click', x: 40, y: 50 }], screenshot: true });
    await d.client.a11y(s.id);
    const base = `http://127.0.0.1:${s.osworld!.serverPort}`;
    const ex = await fetch(`${base}/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ command: ['echo', 'hi'] }),
    });
    assert.equal(ex.status, 200);
    const gshot = Buffer.from(await (await fetch(`${base}/screenshot`)).arrayBuffer());
    const [ep] = await d.client.listEpisodes(s.id);
    assert.equal(ep!.generation, 1);
    assert.equal(ep!.closedAt, null);
    assert.equal(ep!.steps, 2);
    assert.equal(ep!.guestCalls, 2);
    const full = await d.client.getEpisode(s.id, 1, { steps: true });
    assert.deepEqual(
      full.events.filter((e) => e.t !== 'frame').map((e) => (e.t === 'guest' ? `guest ${e.path}` : e.t)),
      ['open', 'screenshot', 'actions', 'tree', 'guest /execute', 'guest /screenshot'],
    );
    // Damage-driven frames (record.frames): the first tick keeps the screen, a changed screen another; an
    // unchanged one none (the same image hashes the same).
    const frames = full.events.filter((e) => e.t === 'frame');
    assert.ok(frames.length >= 1, 'a frame was taken');
    assert.equal(new Set(frames.map((f) => f.sha256)).size, frames.length, 'no frame repeats the one before it');
    assert.ok((await d.client.episodeFile(s.id, 1, frames[0]!.file as string)).subarray(1, 4).toString() === 'PNG');
    assert.equal(full.end.partialBytes, 0);
    // The frames are the images the clients got.
    assert.deepEqual(await d.client.episodeFile(s.id, 1, full.initialFrame!), shot0);
    const steps = full.steps!;
    assert.equal(steps.length, 2);
    assert.deepEqual(steps[0]!.agentAction, [{ type: 'click', x: 40, y: 50 }]);
    assert.match(steps[0]!.frame!, /\.png$/);
    assert.match((await d.client.episodeFile(s.id, 1, steps[0]!.tree!)).toString(), /<desktop-frame|<\?xml|accessibility/i);
    assert.deepEqual((steps[1]!.agentAction as { command: string[] }).command, ['echo', 'hi']);
    assert.deepEqual(await d.client.episodeFile(s.id, 1, steps[1]!.frame!), gshot);
  });

  it('reset closes the attempt and opens the next; an outcome is attached; bad input gets stable codes', async () => {
    const r = await d.client.resetSession(s.id);
    assert.equal(r.recording!.generation, 2);
    const list = await d.client.listEpisodes(s.id);
    assert.deepEqual(
      list.map((e) => [e.generation, e.closeReason]),
      [
        [1, 'reset'],
        [2, null],
      ],
    );
    const scored = await d.client.setEpisodeOutcome(s.id, 1, { reward: 1, outcome: 'success' });
    assert.equal(scored.outcome!.reward, 1);
    assert.equal((await apiError(d.client.setEpisodeOutcome(s.id, 1, { reward: 'x' } as never))).code, 'invalid_outcome');
    assert.equal((await apiError(d.client.setEpisodeOutcome(s.id, 1, {} as never))).code, 'invalid_outcome');
    assert.equal((await apiError(d.client.setEpisodeOutcome(s.id, 1, { outcome: 'Not A Word' }))).code, 'invalid_outcome');
    assert.equal((await apiError(d.client.setEpisodeOutcome(s.id, 99, { reward: 0 }))).code, 'episode_not_found');
    assert.equal((await apiError(d.client.getEpisode(s.id, 99))).code, 'episode_not_found');
    assert.equal((await apiError(d.client.episodeFile(s.id, 1, 'a'.repeat(64) + '.png'))).code, 'episode_not_found');
    assert.equal((await apiError(d.client.getEpisode(plain.id, 1))).code, 'episode_not_found');
  });

  it('drums episodes export writes OSWorld results and the dataset', () => {
    const r = d.cli(['episodes', 'export', s.id, '--generation', '1', '--out', join(out, 'g1'), '--json']);
    assert.equal(r.status, 0, r.stderr);
    const dir = join(out, 'g1');
    const traj = readFileSync(join(dir, 'traj.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.equal(traj.length, 2);
    assert.deepEqual(
      traj.map((t) => t.step_num),
      [1, 2],
    );
    assert.match(traj[0].action_timestamp, /^\d{8}@\d{12}$/);
    for (const t of traj) assert.ok(statSync(join(dir, t.screenshot_file)).size > 100, t.screenshot_file);
    assert.deepEqual(traj[1].action, ['echo', 'hi']);
    assert.equal(readFileSync(join(dir, 'result.txt'), 'utf8'), '1.0\n');
    const steps = readFileSync(join(dir, 'steps.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.equal(steps[0].action[0].type, 'click');
    assert.ok(existsSync(join(dir, steps[0].tree)));
    assert.ok(readdirSync(dir).some((f) => f.startsWith('initial_state.')));
    assert.equal(JSON.parse(readFileSync(join(dir, 'episode.json'), 'utf8')).end.closed, true);
    // recording.mp4: H.264 by ffmpeg from the kept frames.
    assert.equal(readFileSync(join(dir, 'recording.mp4')).subarray(4, 8).toString(), 'ftyp');
    const [res] = JSON.parse(r.stdout) as { videoBytes: number }[];
    assert.ok(res!.videoBytes > 1000, r.stdout);
    // An unknown episode: 404 with its code, nothing written.
    const miss = d.cli(['episodes', 'export', s.id, '--generation', '9', '--out', join(out, 'g9')]);
    assert.notEqual(miss.status, 0);
    assert.match(miss.stderr, /episode_not_found/);
    assert.equal(existsSync(join(out, 'g9')), false);
  });

  it('the session cannot reach its episodes', async () => {
    const r = await d.client.exec(s.id, {
      argv: ['sh', '-c', `ls -d ${d.stateDir}/episodes 2>&1; find / -xdev -name '*.jsonl' 2>/dev/null | head -3`],
      root: true,
    });
    assert.match(r.stdout, /No such file or directory/);
    assert.doesNotMatch(r.stdout, /\.jsonl/);
  });

  it('kill -9 and restart: the adopted session records on in the same episode; a full quota stops recording, not the session', async () => {
    await d.client.screenshot(s.id);
    await killDaemon(d);
    d = await startDaemon(env);
    const before = await d.client.getEpisode(s.id, 2);
    assert.equal(before.episode.closedAt, null);
    await d.client.act(s.id, { actions: [{ type: 'move', x: 5, y: 5 }] });
    const afterRestart = await d.client.getEpisode(s.id, 2);
    // The frames timer (record.frames) may append a frame after the batch: the last event of the batch's own kinds.
    assert.equal(afterRestart.events.filter((e) => e.t !== 'frame').at(-1)!.t, 'actions');
    assert.deepEqual(afterRestart.end.badLines, []);
    // Past the 1 MiB session quota: batches of a thousand moves (~100 KiB of events each).
    const moves = Array.from({ length: 1000 }, (_, i) => ({ type: 'move', x: 10 + (i % 200), y: 10 + (i % 100) }));
    let got: SessionInfo | undefined;
    for (let i = 0; i < 30; i++) {
      await d.client.act(s.id, { actions: moves });
      got = await d.client.getSession(s.id);
      if (got.recording!.stopped) break;
    }
    assert.equal(got!.recording!.stopped, 'session_quota');
    assert.ok((await d.client.screenshot(s.id)).length > 100, 'the session goes on');
    const ep = await d.client.getEpisode(s.id, 2, { limit: 1 });
    assert.equal(ep.episode.stopped, 'session_quota');
    assert.ok(ep.episode.bytes < 1.1 * 1024 ** 2, `bytes ${ep.episode.bytes}`);
    // The other session is not affected.
    assert.deepEqual(await d.client.listEpisodes(plain.id), []);
    // The store is full: a new recorded session is refused, saying what to do; a live episode is not deleted.
    const full = await apiError(d.client.createSession({ image: 'minimal', record: true }));
    assert.equal(full.code, 'episode_store_full');
    assert.match(full.message, /DRUMS_EPISODE_MAX_MB.*drums episodes rm.*DRUMS_EPISODE_KEEP_DAYS/);
    assert.equal((await apiError(d.client.deleteEpisode(s.id, 2))).code, 'episode_open');
    // A claim from a recorded pool is refused the same way (issue 31: it handed out a member whose recording had
    // stopped at its start), and the member made while the store was full stays in the pool, not claimed.
    const pool = `rec-${d.instance}`;
    await d.client.putPool(pool, { size: 1, template: { image: 'minimal', record: true } });
    // Filled by the daemon in the background: wait on its state (a loaded host makes a session in seconds to a minute).
    for (let t0 = Date.now(); (await d.client.getPool(pool)).ready < 1; await new Promise((r) => setTimeout(r, 200))) {
      assert.ok(Date.now() - t0 < 180_000, 'the recorded pool did not fill in 3 minutes');
    }
    const claimFull = await apiError(d.client.claimSession({ pool }));
    assert.deepEqual([claimFull.status, claimFull.code], [507, 'episode_store_full']);
    assert.match(claimFull.message, /drums episodes rm.*claim from a pool whose template has no record/);
    assert.equal((await d.client.getPool(pool)).ready, 1, 'the refused claim took no member');
    // An export of the open episode says where it ends.
    const open = d.cli(['episodes', 'export', s.id, '--generation', '2', '--out', join(out, 'open')]);
    assert.equal(open.status, 0, open.stderr);
    assert.match(open.stdout, /events open, ending at step \d+ \(still recording, or its daemon was killed mid-write\)/);
    // Destroy closes the episode; it is still served after.
    await d.client.destroySession(s.id);
    const gone = await d.client.listEpisodes(s.id);
    assert.equal(gone.at(-1)!.closeReason, 'destroy');
    // Deleted (drums episodes rm): the store has room again, and the episode is 404 to an export.
    const rm = d.cli(['episodes', 'rm', s.id, '2']);
    assert.equal(rm.status, 0, rm.stderr);
    const all = await d.client.listAllEpisodes();
    assert.ok(all.bytes < all.maxBytes / 2, `${all.bytes} of ${all.maxBytes}`);
    assert.deepEqual(
      all.episodes.filter((e) => e.session === s.id).map((e) => e.generation),
      [1],
    );
    const deleted = d.cli(['episodes', 'export', s.id, '--generation', '2', '--out', join(out, 'deleted')]);
    assert.notEqual(deleted.status, 0);
    assert.match(deleted.stderr, /episode_not_found/);
    // With room again, a claim is served, and recorded (a member whose recorder had stopped would be discarded, not
    // handed out).
    const claimed = await d.client.claimSession({ pool });
    assert.equal(claimed.recording!.stopped, null, 'the claimed session records');
    await d.client.releaseSession(claimed.id, { mode: 'destroy' });
    await d.client.deletePool(pool);
    await d.client.destroySession(plain.id);
  });
});
