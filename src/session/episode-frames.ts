/**
 * Damage-driven frames of recorded sessions (spec `record.frames` > 0; docs/episodes.md): at up to `frames` per
 * second, each recorded session's screen is captured through the display service, whose frame cache the X DAMAGE
 * extension drives (src/display/frames.ts): an unchanged screen and cursor cost a round trip and give the same
 * encoding, so the same hash, and the episode keeps a new frame only when the screen changed. Captures take their
 * turn in the fair share like the session's own observations (a session's full queue skips a tick), one in flight
 * per session. Sessions without frames cost one property test per tick.
 */
import type { FairScheduler } from '../policy/fair-share.ts';
import type { DisplayService } from './display-service.ts';
import type { Session } from './session.ts';

/** The timer's period: the finest rate it serves is 1000 / TICK_MS frames per second (MAX_RECORD_FPS). */
const TICK_MS = 1000 / 30;

export function startEpisodeFrames(list: () => Session[], display: DisplayService, fair: FairScheduler): { stop(): void } {
  const last = new Map<string, number>();
  const busy = new Set<string>();
  const timer = setInterval(() => {
    const now = performance.now();
    for (const s of list()) {
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
    for (const id of last.keys()) if (!list().some((s) => s.id === id)) last.delete(id);
  }, TICK_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
