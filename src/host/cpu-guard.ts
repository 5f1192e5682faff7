import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { log } from '../common/log.ts';
import { cgroupMode } from './oci-runtime.ts';

/**
 * Demotes CPU hogs. A session's quota caps what it takes, but at the default
 * weight a session that spins all the time still competes with every
 * interactive neighbour on equal terms, and on a loaded host that shows in
 * their step latency. So twice a second the guard reads each session's CPU
 * time; a session that used at least `hogCores` (0.6) on average over the
 * last `windowS` (2) seconds gets a low weight (v1 cpu.shares 64, v2
 * cpu.weight 6, a 16th of the default) until its demand falls below
 * `calmCores` (0.25). Demand, not use: a demoted hog gets little CPU while its
 * neighbours are busy, so what it used says nothing; its threads' time spent
 * runnable but waiting (/proc/<tid>/schedstat) is added, read only for the
 * few demoted sessions. Weights are work-conserving: a demoted session still
 * gets every cycle nobody else wants; it only loses when a neighbour needs the
 * CPU. A burst of a second (a page load) stays below the window's average and
 * is not demoted. A session whose quota is below `hogCores` is never demoted
 * (its quota already bounds it).
 */
export interface CpuGuardOptions {
  hogCores: number;
  calmCores: number;
  windowS: number;
  intervalMs: number;
  /** Where the cgroup filesystem is, and its version (for tests). */
  root: string;
  v2: boolean;
}

export const CPU_GUARD_DEFAULTS = { hogCores: 0.6, calmCores: 0.25, windowS: 2, intervalMs: 500, root: '/sys/fs/cgroup' };

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
  /** [time ms, usage ns, wait ns] samples, oldest first, covering the window (wait is read only while demoted). */
  samples: [number, number, number][];
  demoted: boolean;
}

/** Time the cgroup's threads spent runnable but not running (ns), summed over the threads there now. */
function waitNs(root: string, v2: boolean, cgroup: string): number {
  let ns = 0;
  try {
    const tids = readFileSync(join(root, v2 ? `${cgroup}/cgroup.threads` : `cpu${cgroup}/tasks`), 'utf8').split('\n');
    for (const tid of tids) {
      if (!tid) continue;
      try {
        ns += Number(readFileSync(`/proc/${tid}/schedstat`, 'utf8').split(' ')[1]) || 0;
      } catch {}
    }
  } catch {}
  return ns;
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

  /** Threads' wait time of a cgroup (ns); a field so tests can supply it. */
  waitOf = (cgroup: string): number => waitNs(this.opts.root, this.opts.v2, cgroup);

  /** Session ids demoted now. */
  demoted(): string[] {
    return [...this._tracks].filter(([, t]) => t.demoted).map(([id]) => id);
  }

  /** One sample of every session (exposed for tests). */
  tick(now: number): void {
    const live = this.cgroups();
    for (const id of this._tracks.keys()) if (!live.has(id)) this._tracks.delete(id);
    for (const [id, cgroup] of live) {
      const ns = usageNs(this.opts.root, this.opts.v2, cgroup);
      if (ns === undefined) continue;
      let t = this._tracks.get(id);
      if (!t) this._tracks.set(id, (t = { samples: [], demoted: false }));
      // A reset makes a new cgroup: its counter starts again from 0.
      if (t.samples.length && ns < t.samples.at(-1)![1]) t.samples = [];
      t.samples.push([now, ns, t.demoted ? this.waitOf(cgroup) : 0]);
      while (t.samples.length > 2 && now - t.samples[1]![0] >= this.opts.windowS * 1000) t.samples.shift();
      const [t0, u0, w0] = t.samples[0]!;
      if (now - t0 < this.opts.windowS * 1000 * 0.9) {
        // Not a full window yet (a new session, or a reset's new cgroup): a demoted one stays demoted.
        if (t.demoted) this._setWeight(id, cgroup, true, 0);
        continue;
      }
      const cores = (ns - u0) / 1e6 / (now - t0);
      // While demoted: demand = use + waiting (threads that exited take their wait with them: clamp).
      const waited = t.demoted ? Math.max(0, t.samples.at(-1)![2] - w0) / 1e6 / (now - t0) : 0;
      const demand = cores + waited;
      const want = cores >= this.opts.hogCores ? true : demand < this.opts.calmCores ? false : t.demoted;
      // Written every tick while demoted: a reset's new cgroup starts at the default weight.
      if (want || want !== t.demoted) this._setWeight(id, cgroup, want, cores);
      if (want && !t.demoted) {
        this.demotions++;
        // From now on its window counts waiting too: start it afresh (it stays demoted meanwhile).
        t.samples = [[now, ns, this.waitOf(cgroup)]];
      }
      t.demoted = want;
    }
  }

  private _setWeight(id: string, cgroup: string, low: boolean, cores: number): void {
    const k = this.opts.v2 ? V2 : V1;
    const file = join(this.opts.root, k.weight.replace('%', cgroup));
    const value = String(low ? k.low : k.normal);
    try {
      if (readFileSync(file, 'utf8').trim() === value) return;
      writeFileSync(file, value);
      log('info', low ? 'session demoted: it keeps the CPU busy' : 'session restored to the normal CPU weight', {
        session: id,
        cores: Math.round(cores * 100) / 100,
      });
    } catch {}
  }
}
