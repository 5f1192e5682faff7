import { afterEach, beforeEach, describe, it, mock } from 'node:test';
import assert from 'node:assert/strict';
import { startEpisodeFrames } from '../../src/session/episode-frames.ts';
import { FairScheduler } from '../../src/policy/fair-share.ts';
import type { DisplayService } from '../../src/session/display-service.ts';
import type { Session } from '../../src/session/session.ts';

/**
 * The episode frames' 30 Hz timer runs only while a session records frames: a daemon with no such session lists
 * no sessions at all (it listed them 30 times a second before), and the first recording session wakes it.
 * Virtual timers (setInterval mocked): the ticks are counted, not waited for.
 */
describe('episode frames timer', () => {
  beforeEach(() => mock.timers.enable({ apis: ['setInterval'] }));
  afterEach(() => mock.timers.reset());

  const fakeDisplay = (shots: string[]) =>
    ({
      screenshot: async (s: Session) => {
        shots.push(s.id);
        return { data: Buffer.from('png'), format: 'png' };
      },
    }) as unknown as DisplayService;
  const recorded = (id: string, frames: number) => {
    const got: unknown[] = [];
    const s = { id, state: 'ready', spec: { record: { frames } }, _episode: { stopped: null, frame: (shot: unknown) => got.push(shot) } };
    return { s: s as unknown as Session, got };
  };

  it('arms no timer without a recording session, and arms and disarms it with one', async () => {
    const sessions: Session[] = [];
    let lists = 0;
    const list = () => {
      lists++;
      return sessions;
    };
    const shots: string[] = [];
    const frames = startEpisodeFrames(list, fakeDisplay(shots), new FairScheduler({ slots: 2, maxQueue: 4 }));
    try {
      // The first tick looks (sessions adopted at start may record) and finds nothing: the timer is gone.
      mock.timers.tick(34);
      const before = lists;
      mock.timers.tick(10_000);
      assert.equal(lists, before, 'no session was listed while nobody records frames');
      assert.equal(frames.armed(), false, 'no session records frames: no timer');

      // A session without frames (record: { frames: 0 }) does not keep it armed either.
      const still = recorded('still', 0);
      sessions.push(still.s);
      frames.wake();
      mock.timers.tick(34);
      assert.equal(frames.armed(), false, 'a recording without frames keeps no timer');

      // A session recording frames wakes it (the manager's `recording` hook), and its frames are captured.
      const moving = recorded('moving', 10);
      sessions.push(moving.s);
      frames.wake();
      assert.equal(frames.armed(), true, 'the first recording session arms the timer');
      mock.timers.tick(34);
      for (let i = 0; i < 10 && moving.got.length === 0; i++) await new Promise((r) => setImmediate(r));
      assert.deepEqual(shots, ['moving'], 'its screen was captured');
      assert.equal(moving.got.length, 1, 'and kept as a frame');
      mock.timers.tick(1000);
      assert.equal(frames.armed(), true, 'the timer runs while it records');

      // The last one gone (destroyed, or its recorder stopped): the next tick disarms.
      (moving.s as unknown as { _episode: { stopped: string } })._episode.stopped = 'quota';
      mock.timers.tick(34);
      assert.equal(frames.armed(), false, 'a stopped recorder keeps no timer');
      sessions.splice(0);
      const after = lists;
      mock.timers.tick(10_000);
      assert.equal(lists, after, 'no listing once nobody records');
    } finally {
      frames.stop();
    }
  });

  it('does not re-arm after stop', () => {
    const { s } = recorded('x', 5);
    const frames = startEpisodeFrames(() => [s], fakeDisplay([]), new FairScheduler({ slots: 2, maxQueue: 4 }));
    frames.stop();
    frames.wake();
    assert.equal(frames.armed(), false);
  });
});
