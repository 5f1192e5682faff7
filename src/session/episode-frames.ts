/**
 * Damage-driven frames of recorded sessions (spec `record.frames` > 0; docs/episodes.md): at up to `frames` per
 * second, each recorded session's screen is captured through the display service, whose frame cache the X DAMAGE
 * extension drives (src/display/frames.ts): an unchanged screen and cursor cost a round trip and give the same
 * encoding, so the same hash, and the episode keeps a new frame only when the screen changed. Captures take their
 * turn in the fair share like the session's own observations (a session's full queue skips a tick), one in flight
 * per session. The timer runs only while some session records frames: `wake()` (the manager's `recording` hook, when
 * an episode opens) arms it, and a tick that finds no such session disarms it, so a daemon that records no frames
 * has no timer at all (it listed every session 30 times a second before).
 */
import type { FairScheduler } from '../policy/fair-share.ts';
import type { DisplayService } from './display-service.ts';
import type { Session } from './session.ts';

/** The timer's period: the finest rate it serves is 1000 / TICK_MS frames per second (MAX_RECORD_FPS). */
const TICK_MS = 1000 / 30;

export interface EpisodeFrames {
  /** Arms the timer if it is not running (an episode opened); a tick with nothing to capture disarms it again. */
  wake(): void;
  /** Whether the timer is armed (for tests and /metrics-like checks). */
  armed(): boolean;
  stop(): void;
}

export function startEpisodeFrames(list: () => Session[], display: DisplayService, fair: FairScheduler): EpisodeFrames {
  const last = new Map<string, number>();
  const busy = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const records = (s: Session) => !!s._episode && (s.spec.record?.frames ?? 0) > 0;
  const tick = () => {
    const now = performance.now();
    const sessions = list();
    // Nobody records frames any more (the last recorded session was reset without record, destroyed, or its
    // recorder stopped): disarm until the next episode opens.
    if (!sessions.some((s) => records(s) && !s._episode?.stopped)) {
      clearInterval(timer);
      timer = undefined;
      last.clear();
      return;
    }
    for (const s of sessions) {
      const rec = s._episode;
      const fps = s.spec.record?.frames ?? 0;
      if (!rec || fps <= 0 || s.state !== 'ready' || rec.stopped || busy.has(s.id)) continue;
      if (now - (last.get(s.id) ?? 0) < 1000 / fps - TICK_MS / 2) continue;
      last.set(s.id, now);
      busy.add(s.id);
      const at = Date.now();
      fair
        .run(s.id, () => display.screenshot(s, { format: 'png', cursor: true }))
        .then(
          (shot) => {
            // Still this generation's recorder (a reset closes it and opens the next).
            if (s._episode === rec) rec.frame(shot, at);
          },
          () => {},
        )
        .finally(() => busy.delete(s.id));
    }
    for (const id of last.keys()) if (!sessions.some((s) => s.id === id)) last.delete(id);
  };
  const wake = () => {
    if (timer || stopped) return;
    timer = setInterval(tick, TICK_MS);
    timer.unref();
  };
  // Sessions adopted at start may already record: the first tick looks, and disarms if none does.
  wake();
  return {
    wake,
    armed: () => timer !== undefined,
    stop: () => {
      stopped = true;
      clearInterval(timer);
      timer = undefined;
    },
  };
}
