import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { log } from '../common/log.ts';
import { cgroupMode } from './oci-runtime.ts';

/**
 * Demotes CPU hogs. A session's quota caps what it takes, but at the default
 * weight a session that spins all the time still competes with every
 * interactive neighbour, and each of their wake-ups can wait out its slice.
 * So twice a second the guard reads each session's CPU time over the last
 * `windowS` (2) seconds. A session is a hog if it used at least `hogCores`
 * (0.6), or at least `minCores` (0.2) and `ratio` (2.5) times the median of
 * the other sessions (on a busy host the weights already hold a spinning
 * session near its neighbours' share, so an absolute bar alone misses it).
 * A hog is demoted for `holdS` (10) seconds: cpu.idle 1 where the kernel has
 * it (5.15+, v1 and v2: it runs when nothing else wants the CPU, and a waking
 * neighbour preempts it at once), and a 16th of the weight either way (v1
 * cpu.shares 64, v2 cpu.weight 6). Then it is back at the normal weight on
 * probation and judged again after a window; a hog that still spins spends
 * about 2 s of every 12 at the normal weight. What a demoted session gets says
 * nothing about what it wants (its neighbours go first), hence the probation.
 * Demotion is work-conserving: on an idle host a demoted session runs at full
 * speed. A session whose quota is below `minCores` is never demoted (its
 * quota bounds it).
 */
export interface CpuGuardOptions {
  hogCores: number;
  minCores: number;
  ratio: number;
  holdS: number;
  windowS: number;
  intervalMs: number;
  /** Where the cgroup filesystem is, and its version (for tests). */
  root: string;
  v2: boolean;
}

export const CPU_GUARD_DEFAULTS = { hogCores: 0.6, minCores: 0.2, ratio: 2.5, holdS: 10, windowS: 2, intervalMs: 500, root: '/sys/fs/cgroup' };

const V1 = { usage: 'cpuacct/%/cpuacct.usage', weight: 'cpu/%/cpu.shares', normal: 1024, low: 64 };
const V2 = { usage: '%/cpu.stat', weight: '%/cpu.weight', normal: 100, low: 6 };

/** CPU time (ns) of a cgroup, or undefined when it is gone. */
function usageNs(root: string, v2: boolean, cgroup: string): number | undefined {
  try {
    const text = readFileSync(join(root, (v2 ? V2 : V1).usage.replace('%', cgroup)), 'utf8');
    if (!v2) return Number(text.trim());
    const m = /^usage_usec (\d+)$/m.exec(text);
    return m ? Number(m[1]) * 1000 : undefined;
  } catch {
    return undefined;
  }
}

interface Track {
  /** [time ms, usage ns] samples, oldest first, covering the window. */
  samples: [number, number][];
  demoted: boolean;
  /** When it was last demoted or restored (ms). */
  since: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export class CpuGuard {
  private readonly _tracks = new Map<string, Track>();
  private _timer: NodeJS.Timeout | undefined;
  readonly opts: CpuGuardOptions;
  /** Sessions demoted since start, for /metrics. */
  demotions = 0;

  /** `cgroups()` gives the live sessions' cgroup paths (`/drums-<inst>/<id>`) by session id. */
  private readonly cgroups: () => Map<string, string>;
  constructor(cgroups: () => Map<string, string>, opts: Partial<CpuGuardOptions> = {}) {
    this.cgroups = cgroups;
    this.opts = { ...CPU_GUARD_DEFAULTS, v2: opts.v2 ?? cgroupMode() === 'v2', ...opts };
  }

  start(): void {
    this._timer ??= setInterval(() => this.tick(performance.now()), this.opts.intervalMs);
    this._timer.unref();
  }

  stop(): void {
    clearInterval(this._timer);
    this._timer = undefined;
  }

  /** Session ids demoted now. */
  demoted(): string[] {
    return [...this._tracks].filter(([, t]) => t.demoted).map(([id]) => id);
  }

  /** One sample of every session (exposed for tests). */
  tick(now: number): void {
    const live = this.cgroups();
    const win = this.opts.windowS * 1000;
    for (const id of this._tracks.keys()) if (!live.has(id)) this._tracks.delete(id);
    // 1. Each session's CPU over its window (undefined until the window is full).
    const use = new Map<string, number>();
    for (const [id, cgroup] of live) {
      const ns = usageNs(this.opts.root, this.opts.v2, cgroup);
      if (ns === undefined) continue;
      let t = this._tracks.get(id);
      if (!t) this._tracks.set(id, (t = { samples: [], demoted: false, since: now }));
      // A reset makes a new cgroup: its counter starts again from 0.
      if (t.samples.length && ns < t.samples.at(-1)![1]) t.samples = [];
      t.samples.push([now, ns]);
      while (t.samples.length > 2 && now - t.samples[1]![0] >= win) t.samples.shift();
      const [t0, u0] = t.samples[0]!;
      if (now - t0 >= win * 0.9) use.set(id, (ns - u0) / 1e6 / (now - t0));
    }
    // 2. Verdicts. A hog: at least hogCores, or at least minCores and `ratio` times the median
    // of the other undemoted sessions (on a busy host the weights already hold a spinning
    // session near its neighbours' share, so an absolute bar alone never sees it).
    const undemoted = [...use].filter(([id]) => !this._tracks.get(id)!.demoted);
    for (const [id, cgroup] of live) {
      const t = this._tracks.get(id);
      if (!t) continue;
      const cores = use.get(id);
      if (t.demoted) {
        // Demoted: what it gets says little (its neighbours take the CPU first), so after
        // holdS it is put back on probation at the normal weight, and judged again.
        if (now - t.since >= this.opts.holdS * 1000) {
          this._set(id, cgroup, false, cores ?? 0);
          t.demoted = false;
          t.since = now;
          t.samples = t.samples.slice(-1);
        } else this._set(id, cgroup, true, cores ?? 0); // again: a reset's new cgroup starts at the default
        continue;
      }
      if (cores === undefined) continue;
      const others = undemoted.filter(([o]) => o !== id).map(([, c]) => c);
      const hog = cores >= this.opts.hogCores || (others.length > 0 && cores >= this.opts.minCores && cores >= this.opts.ratio * median(others));
      if (!hog) continue;
      this._set(id, cgroup, true, cores);
      t.demoted = true;
      t.since = now;
      this.demotions++;
    }
  }

  private _set(id: string, cgroup: string, low: boolean, cores: number): void {
    const k = this.opts.v2 ? V2 : V1;
    const file = join(this.opts.root, k.weight.replace('%', cgroup));
    // cpu.idle (Linux 5.15+, v1 and v2): the group is scheduled like SCHED_IDLE, so a waking
    // neighbour preempts it at once instead of waiting out its slice; a low weight alone still
    // let a hog delay every wake-up on a step's path by up to a slice.
    const idle = join(this.opts.root, k.weight.replace('%', cgroup).replace(/[^/]+$/, 'cpu.idle'));
    const value = String(low ? k.low : k.normal);
    try {
      const idleNow = existsSync(idle) ? readFileSync(idle, 'utf8').trim() : undefined;
      // An idle group reports the minimum weight (v2 cpu.weight 1) and refuses weight writes
      // (EINVAL), so cpu.idle 1 alone says it is demoted.
      if (low && idleNow === '1') return;
      if (readFileSync(file, 'utf8').trim() === value && (idleNow === undefined || idleNow === (low ? '1' : '0'))) return;
      if (idleNow !== undefined && !low) writeFileSync(idle, '0');
      writeFileSync(file, value);
      if (idleNow !== undefined && low) writeFileSync(idle, '1');
      log('info', low ? 'session demoted: it keeps the CPU busy' : 'session restored to the normal CPU weight', {
        session: id,
        cores: Math.round(cores * 100) / 100,
      });
    } catch {}
  }
}
