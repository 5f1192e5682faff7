import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type EpisodeLimits, EpisodeStore, parseEvents, stepsOf } from '../../src/session/episodes.ts';

const root = mkdtempSync(join(tmpdir(), 'drums-episodes-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
function store(limits: EpisodeLimits = { sessionBytes: 1024 ** 2, hostBytes: 8 * 1024 ** 2 }) {
  const dir = join(root, `state${n++}`);
  mkdirSync(dir);
  const st = new EpisodeStore(dir, limits);
  st.init();
  return st;
}
const ID = 's0123456789';
const ID2 = 's00000000aa';
const png = (k: number) => Buffer.concat([Buffer.from('\x89PNG fake '), Buffer.from(String(k))]);

describe('episode store', () => {
  it('records events, derives steps with their frames and trees, and reads back what it wrote', async () => {
    const st = store();
    const rec = st.open(ID, 1, { frames: 1000, a11y: true });
    rec.screenshot({ data: png(0), format: 'png', width: 10, height: 10 }, 1);
    rec.actions({ at: 2, ms: 1, actions: [{ type: 'click', x: 1, y: 2 }], steps: [{ type: 'click', x: 1, y: 2 }], results: [{ index: 0 }] });
    await new Promise((r) => setTimeout(r, 5));
    rec.screenshot({ data: png(1), format: 'png', width: 10, height: 10 }, 3);
    rec.tree('<desktop/>', 'xml', 4);
    rec.guest({
      path: '/execute',
      method: 'POST',
      status: 200,
      at: 5,
      ms: 2,
      body: Buffer.from('{"command":["python3","-c","pass"]}'),
      reply: { returncode: 0 },
    });
    await new Promise((r) => setTimeout(r, 5));
    rec.guest({ path: '/screenshot', method: 'GET', status: 200, at: 6, ms: 2, body: Buffer.alloc(0), reply: png(2) });
    await st.close(ID, 1, 'reset');
    const { summary, events, end } = await st.read(ID, 1);
    assert.deepEqual(
      events.map((e) => e.t),
      ['open', 'screenshot', 'actions', 'screenshot', 'tree', 'guest', 'guest', 'close'],
    );
    assert.equal(end.closed, true);
    assert.equal(end.partialBytes, 0);
    assert.equal(summary.steps, 2);
    assert.equal(summary.closeReason, 'reset');
    assert.equal(summary.frames, 3);
    const { steps, initialFrame } = stepsOf(events);
    assert.equal(steps.length, 2);
    assert.match(initialFrame!, /^[0-9a-f]{64}\.png$/);
    assert.equal(steps[0]!.source, 'api');
    assert.equal(steps[0]!.frame, events[3]!.file);
    assert.match(steps[0]!.tree!, /\.xml$/);
    assert.equal(steps[1]!.source, 'osworld');
    assert.deepEqual((steps[1]!.agentAction as { command: string[] }).command, ['python3', '-c', 'pass']);
    assert.equal(steps[1]!.frame, events[6]!.file);
    assert.deepEqual(await st.file(ID, 1, steps[1]!.frame!), png(2));
    assert.equal((await st.file(ID, 1, steps[0]!.tree!)).toString(), '<desktop/>');
  });

  it('a half-written last line: read up to the last complete one, and a reopen (daemon restart) records on', async () => {
    const st = store();
    const rec = st.open(ID, 1, { frames: 0, a11y: false });
    rec.actions({ at: 1, ms: 1, actions: [{ type: 'key', key: 'a' }], steps: [], results: [] });
    await rec.flush();
    // The daemon is killed mid-write: half a line, no newline.
    const path = join(st.dir, ID, '1.jsonl');
    appendFileSync(path, '{"t":"actions","at":2,"actio');
    const half = await st.read(ID, 1);
    assert.equal(half.end.lines, 2);
    assert.equal(half.end.partialBytes, '{"t":"actions","at":2,"actio'.length);
    assert.equal(half.end.closed, false);
    // A new daemon adopts the session and reopens its episode.
    await st.detach();
    const st2 = new EpisodeStore(join(st.dir, '..'), st.limits);
    st2.init();
    const rec2 = st2.open(ID, 1, { frames: 0, a11y: false });
    assert.equal(rec2.summary.steps, 1, 'the counts come from the file');
    rec2.actions({ at: 3, ms: 1, actions: [{ type: 'key', key: 'b' }], steps: [], results: [] });
    await st2.close(ID, 1, 'destroy');
    const r = await st2.read(ID, 1);
    assert.deepEqual(r.end.badLines, [3], 'the cut line is named and skipped');
    assert.deepEqual(
      r.events.map((e) => e.t),
      ['open', 'actions', 'actions', 'close'],
    );
    assert.equal(r.end.closed, true);
    assert.equal(r.summary.steps, 2);
  });

  it('a session over its quota stops recording with a flag; another session records on; the host quota stops new ones', async () => {
    const st = store({ sessionBytes: 4096, hostBytes: 9000 });
    const rec = st.open(ID, 1, { frames: 0, a11y: false });
    const big = 'x'.repeat(500);
    for (let i = 0; i < 40; i++) rec.actions({ at: i, ms: 1, actions: [{ type: 'type', text: big }], steps: [], results: [] });
    assert.equal(rec.stopped, 'session_quota');
    await st.close(ID, 1, 'destroy');
    const size = statSync(join(st.dir, ID, '1.jsonl')).size;
    assert.ok(size <= 4096 + 4096, `the file stays within the quota and the tail room: ${size}`);
    const r = await st.read(ID, 1);
    assert.ok(r.events.some((e) => e.t === 'stopped' && e.why === 'session_quota'));
    assert.equal(r.events.at(-1)!.t, 'close', 'a full episode still says how it ended');
    assert.ok(r.summary.steps < 40);
    // Another session is not affected by this one's quota...
    const other = st.open(ID2, 1, { frames: 0, a11y: false });
    other.actions({ at: 1, ms: 1, actions: [], steps: [], results: [] });
    assert.equal(other.stopped, null);
    // ...until the host-wide quota is reached.
    for (let i = 0; i < 40; i++) other.actions({ at: i, ms: 1, actions: [{ type: 'type', text: big }], steps: [], results: [] });
    assert.ok(other.stopped === 'host_quota' || other.stopped === 'session_quota');
    await st.close(ID2, 1, 'destroy');
    assert.ok(st.totalBytes <= 9000 + 2 * 4096, `host total ${st.totalBytes}`);
    // A new generation of the full session is flagged at once.
    const next = st.open(ID, 2, { frames: 0, a11y: false });
    assert.equal(next.stopped, 'session_quota');
    await st.close(ID, 2, 'destroy');
  });

  it("frames: at most `frames` new files per second besides each step's frame, each distinct image once", async () => {
    const st = store();
    const rec = st.open(ID, 1, { frames: 2, a11y: false });
    for (let i = 0; i < 10; i++) rec.screenshot({ data: png(i), format: 'png', width: 1, height: 1 }, i);
    rec.screenshot({ data: png(0), format: 'png', width: 1, height: 1 }, 11);
    // A step: its own screenshot is kept at once, whatever the rate.
    rec.actions({ at: 12, ms: 1, actions: [], steps: [], results: [], shot: { data: png(20), format: 'png', width: 1, height: 1 } });
    rec.screenshot({ data: png(21), format: 'png', width: 1, height: 1 }, 13);
    rec.guest({ path: '/execute', method: 'POST', status: 200, at: 14, ms: 1, body: Buffer.alloc(0) });
    rec.guest({ path: '/screenshot', method: 'GET', status: 200, at: 15, ms: 1, body: Buffer.alloc(0), reply: png(22) });
    await st.close(ID, 1, 'destroy');
    const files = readdirSync(join(st.dir, ID, '1.files'));
    assert.equal(files.length, 3, "ten frames within half a second at 2 fps: one file; then the two steps' frames");
    const { events } = await st.read(ID, 1);
    const shots = events.filter((e) => e.t === 'screenshot');
    assert.equal(shots.length, 12, 'every observation is an event (its hash)');
    assert.equal(shots.filter((e) => e.file).length, 2, "the repeated image points at its kept file; the one after the step's own is rate-limited");
    const { steps } = stepsOf(events);
    assert.ok(steps[0]!.frame && steps[1]!.frame);
  });

  it('damage-driven frames: an event and a file only when the image changed', async () => {
    const st = store();
    const rec = st.open(ID, 1, { frames: 10, a11y: false });
    for (const k of [1, 1, 1, 2, 2, 1]) rec.frame({ data: png(k), format: 'png', width: 1, height: 1 }, k);
    await st.close(ID, 1, 'destroy');
    const { events, summary } = await st.read(ID, 1);
    assert.deepEqual(
      events.filter((e) => e.t === 'frame').map((e) => e.sha256),
      [1, 2, 1].map((k) => createHash('sha256').update(png(k)).digest('hex')),
    );
    assert.equal(summary.frames, 2, 'two distinct images kept');
    assert.equal(readdirSync(join(st.dir, ID, '1.files')).length, 2);
  });

  it('outcomes: on a closed episode too; 404 for one never recorded; bad names refused', async () => {
    const st = store();
    st.open(ID, 1, { frames: 0, a11y: false });
    await st.close(ID, 1, 'reset');
    const s = st.setOutcome(ID, 1, { reward: 1, outcome: 'success' });
    assert.equal(s.outcome?.reward, 1);
    assert.equal(st.list(ID)[0]!.outcome?.outcome, 'success');
    const { events } = await st.read(ID, 1);
    assert.equal(events.at(-1)!.t, 'outcome');
    assert.throws(() => st.setOutcome(ID, 2, { reward: 0 }), { code: 'episode_not_found' });
    await assert.rejects(st.read('../../etc', 1), { code: 'episode_not_found' });
    await assert.rejects(st.file(ID, 1, '../1.jsonl'), { code: 'episode_not_found' });
  });

  it('never writes through a link planted where an episode file goes', async () => {
    const st = store();
    const target = join(root, `target${n}`);
    writeFileSync(target, 'host file\n');
    mkdirSync(join(st.dir, ID), { recursive: true });
    symlinkSync(target, join(st.dir, ID, '1.jsonl'));
    const rec = st.open(ID, 1, { frames: 0, a11y: false });
    rec.actions({ at: 1, ms: 1, actions: [], steps: [], results: [] });
    await st.close(ID, 1, 'destroy');
    assert.equal(readFileSync(target, 'utf8'), 'host file\n');
    assert.equal(rec.stopped, 'write_error');
  });

  it('retention: closed episodes past the age, then the oldest past the count, are deleted; open ones never', async () => {
    const tick = () => new Promise((r) => setTimeout(r, 3));
    const ages = store({ sessionBytes: 1024 ** 2, hostBytes: 8 * 1024 ** 2, keepMs: 86_400_000, keepCount: 0 });
    for (const [id, g] of [
      [ID, 1],
      [ID2, 1],
    ] as const) {
      ages.open(id, g, { frames: 0, a11y: false });
      await ages.close(id, g, 'reset');
    }
    ages.open(ID, 2, { frames: 0, a11y: false });
    assert.equal(ages.retain(), 0, 'nothing is a day old yet');
    assert.equal(ages.retain(Date.now() + 2 * 86_400_000), 2);
    assert.deepEqual(
      ages.listAll().map((e) => `${e.session}/${e.generation}`),
      [`${ID}/2`],
    );
    assert.deepEqual(readdirSync(ages.dir), [ID], "the emptied session's directory went too");
    await assert.rejects(ages.read(ID2, 1), { code: 'episode_not_found' });

    const count = store({ sessionBytes: 1024 ** 2, hostBytes: 8 * 1024 ** 2, keepMs: 0, keepCount: 2 });
    for (const g of [1, 2, 3, 4]) {
      count.open(ID, g, { frames: 0, a11y: false });
      await count.close(ID, g, 'reset');
      await tick();
    }
    count.open(ID, 5, { frames: 0, a11y: false });
    const before = count.totalBytes;
    assert.equal(count.retain(), 2);
    assert.deepEqual(
      count.list(ID).map((e) => e.generation),
      [3, 4, 5],
    );
    assert.ok(count.totalBytes < before, 'the bytes are counted off');
    // By hand: a live episode is refused, a closed one goes.
    assert.throws(() => count.remove(ID, 5), { code: 'episode_open' });
    count.remove(ID, 3);
    assert.throws(() => count.remove(ID, 3), { code: 'episode_not_found' });
  });

  it('listAll filters by outcome; the store is full from a refused write until an episode is deleted', async () => {
    const st = store({ sessionBytes: 1024 ** 2, hostBytes: 64 * 1024 });
    for (const [g, o] of [
      [1, { reward: 0 }],
      [2, { reward: 1, outcome: 'success' }],
      [3, { reward: 1, outcome: 'timeout' }],
      [4, null],
    ] as const) {
      st.open(ID, g, { frames: 0, a11y: false });
      await st.close(ID, g, 'reset');
      if (o) st.setOutcome(ID, g, o);
    }
    const gens = (outcome?: string) =>
      st
        .listAll(outcome ? { outcome } : {})
        .map((e) => e.generation)
        .sort();
    assert.deepEqual(gens('failure'), [1, 3]);
    assert.deepEqual(gens('success'), [2]);
    assert.deepEqual(gens('unscored'), [4]);
    assert.deepEqual(gens('timeout'), [3]);
    assert.deepEqual(gens(), [1, 2, 3, 4]);
    assert.equal(st.hostFull(), false);
    const rec = st.open(ID2, 1, { frames: 0, a11y: false });
    rec.actions({ at: 1, ms: 1, actions: ['x'.repeat(80 * 1024)], steps: [], results: [] });
    assert.equal(rec.stopped, 'host_quota');
    assert.equal(st.hostFull(), true);
    await st.close(ID2, 1, 'destroy');
    st.remove(ID, 1);
    assert.equal(st.hostFull(), false);
  });

  it('parseEvents: empty file, no newline at all', () => {
    assert.deepEqual(parseEvents(Buffer.alloc(0)).end, { closed: false, lines: 0, badLines: [], partialBytes: 0 });
    assert.deepEqual(parseEvents(Buffer.from('{"t":"op')).end, { closed: false, lines: 0, badLines: [], partialBytes: 8 });
  });
});
