/**
 * The CPU guard's verdicts (src/policy/cpu-guard.ts samples, this judges): when a session is a hog,
 * and when a demoted one is let go. Pure functions over what the guard measured; the knobs are
 * `RuleOptions`, and docs/bench.md ("The CPU guard's rules") gives the runs behind each.
 *
 * Every rule needs a contended host (the guard checks it last): on an idle host a spinner hurts no
 * one and keeps the whole of its quota. Nor is a session judged whose own quota is below `minCores`
 * (it bounds it), nor one in its `graceS` after its create or reset (a desktop and a browser starting
 * up are busy for seconds), except for a fork refused at pids.max.
 */

/** The rules' knobs (cores, shares, counts, seconds); CPU_GUARD_DEFAULTS in cpu-guard.ts gives their values. */
export interface RuleOptions {
  /** A session whose spin floor over the window is at least this is a hog (cores). */
  hogCores: number;
  /** ...or at least this, and `ratio` times the upper quartile of the other undemoted sessions' spin means. */
  minCores: number;
  ratio: number;
  /** A session with this many tasks spinning over one full tick is judged on that tick. */
  spinTasksAtOnce: number;
  /** ...and with one, when at least this share of its CPU over the tick was system time (spinning in the kernel). */
  kernelSpinShare: number;
  /** A demoted session that hit its cap in fewer than this share of its periods over a window is restored. */
  releaseShare: number;
  /** A demotion lasts at most this long (s); a session restored less than this ago is judged on one spinning task. */
  maxHoldS: number;
  /** The tick (ms): evidence from a tick judges only over at least most of one. */
  intervalMs: number;
}

/** A session's CPU over a span of samples (the window, the fast window or the last tick), in cores unless said. */
export interface Rates {
  mean: number;
  /** The least of the per-tick rates. */
  floor: number;
  /** Spinning CPU: tasks that ran `spinBurstMs` in a tick without a voluntary sleep, and tasks that ended in it. */
  spinMean: number;
  spinFloor: number;
  /** The fewest tasks that spun in any tick. */
  spinTasks: number;
  /** The share of its CFS periods it was throttled in. */
  throttledShare: number;
  /** The share of its CPU that was system time. */
  sysShare: number;
  spanS: number;
}

/** What the guard knows of an undemoted session at a tick. */
export interface Facts {
  /** Its last tick, and its window (full, or the fast window when that already tells). */
  tick: Rates | undefined;
  window: Rates | undefined;
  /** The spin means over the window of the other undemoted sessions. */
  others: number[];
  /** A fork refused at pids.max since the last tick (pids.events `max`). */
  forkRefused: boolean;
  /** Its tasks (pids.current) rose by `forkRampTasks` since the last tick, out of its grace. */
  forkRamp: boolean;
  /** OOM-killed since the last tick (memory.events `oom_kill`, v1 memory.oom_control). */
  oomKilled: boolean;
  /** Restored from a demotion less than `maxHoldS` ago. */
  restoredLately: boolean;
  graced: boolean;
  /** Its own quota is below `minCores`. */
  bounded: boolean;
}

interface Rule {
  /** The reason the log gives. */
  why: string;
  /** Whether it holds in the session's grace. */
  inGrace?: boolean;
  holds(f: Facts & { tick: Rates }, o: RuleOptions): boolean;
}

/** Tasks spun over one full tick, at least `minCores` of them. */
const spunTick = (tick: Rates, o: RuleOptions) => tick.spinFloor >= o.minCores && tick.spanS * 1000 >= o.intervalMs * 0.8;

/**
 * Sooner than the window, on the kernel's own evidence over the last tick: the first rule that holds
 * names the reason.
 */
export const EVIDENCE_RULES: readonly Rule[] = [
  // A fork bomb: its processes sleep between retries, so its floor stays near 0.
  { why: 'forks refused at pids.max', inGrace: true, holds: (f) => f.forkRefused },
  // A bomb on its way to pids.max.
  { why: "its tasks rose at a fork bomb's rate", holds: (f) => f.forkRamp },
  // A memory hog at its limit, busy in the kernel filling and zeroing pages after each kill.
  { why: 'OOM-killed while busy', holds: (f, o) => f.oomKilled && f.tick.floor >= o.minCores },
  // A hog that paused (a disk fill between two writebacks), not a browser's burst, which was never demoted.
  { why: 'it spins again after a demotion', holds: (f, o) => f.restoredLately && f.tick.spinTasks >= 1 && spunTick(f.tick, o) },
  // A parallel computation: a browser's threads sleep between events.
  { why: 'several tasks spin', holds: (f, o) => f.tick.spinTasks >= o.spinTasksAtOnce && spunTick(f.tick, o) },
  // No interactive app spins in the kernel for a tick without a sleep.
  {
    why: 'a task spins in the kernel',
    holds: (f, o) => f.tick.sysShare >= o.kernelSpinShare && f.tick.spinTasks >= 1 && spunTick(f.tick, o),
  },
];

/**
 * Over the window: it spun in every tick (its spin floor), a lot, or much more than its neighbours
 * (on a busy host the weights hold a spinner near their share; where all compute alike, no hog).
 */
export const WINDOW_RULE = {
  why: 'it keeps the CPU busy',
  holds: (w: Rates, others: number[], o: RuleOptions) =>
    w.spinFloor >= o.hogCores || (others.length > 0 && w.spinFloor >= o.minCores && w.spinFloor >= o.ratio * quantileOf(others, 0.75)),
};

export interface Verdict {
  why: string;
  /** The span it rests on, and the cores the log gives. */
  on: Rates;
  cores: number;
}

/** Whether an undemoted session is a hog (before the contention check), and why. */
export function judge(f: Facts, o: RuleOptions): Verdict | undefined {
  const tick = f.tick;
  if (tick && !f.bounded) {
    const rule = EVIDENCE_RULES.find((r) => (r.inGrace || !f.graced) && r.holds({ ...f, tick }, o));
    if (rule) return { why: rule.why, on: tick, cores: tick.floor };
  }
  if (!f.window || f.graced || !WINDOW_RULE.holds(f.window, f.others, o)) return undefined;
  return { why: WINDOW_RULE.why, on: f.window, cores: f.window.spinFloor };
}

/** What the guard knows of a demoted session at a tick. */
export interface DemotedFacts {
  /** Its window since the demotion (undefined until full). */
  window: Rates | undefined;
  /** How long it has been demoted (ms). */
  heldMs: number;
  /** A fork refused or an OOM kill within `evidenceHoldS`: a bomb retries and a memory hog refills every few seconds. */
  stillAbusing: boolean;
  /** The host is contended for it over that window. */
  contended: boolean;
}

/**
 * Whether a demoted session is let go: after `maxHoldS` in any case (a safety valve for an
 * interactive session taken for a hog); once its window is full, when it hit the cap in fewer than
 * `releaseShare` of its periods and the kernel saw no more abuse (not throttled alone is no proof of
 * calm: on a busy host an idle-ranked group may not even get its cap), or when the host is no longer
 * contended.
 */
export function release(f: DemotedFacts, o: RuleOptions): boolean {
  if (f.heldMs >= o.maxHoldS * 1000) return true;
  if (!f.window) return false;
  return (!f.stillAbusing && f.window.throttledShare < o.releaseShare) || !f.contended;
}

/** The q-quantile of xs, linearly interpolated (q 0.5: the median). */
export function quantileOf(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  return s[lo]! + (s[Math.min(lo + 1, s.length - 1)]! - s[lo]!) * (at - lo);
}
