import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus as hostCpus } from 'node:os';
import { join } from 'node:path';
import { log } from '../common/log.ts';
import { CGROUP_ROOT, CPU_FILES_V1 as V1, CPU_FILES_V2 as V2, cgroupMode } from '../host/cgroup-fs.ts';
import { judge, type Rates, type RuleOptions, release } from './cpu-rules.ts';

/**
 * Demotes CPU hogs. A session's quota caps what it takes, but a session that spins all the time
 * still competes with every interactive neighbour, the daemon and the clients, and each of their
 * wake-ups can wait out its slice. This file samples and writes; the verdicts are cpu-rules.ts, and
 * docs/bench.md ("The CPU guard's rules") gives the runs behind each number.
 *
 * Sampling. Every `intervalMs` (a tick) the guard reads each session's CPU time (user and system),
 * its CFS throttle counts, pids.current, pids.events and its OOM kills; and the CPU time and
 * voluntary context switches of each of its tasks (/proc schedstat and status), from which a tick's
 * spinning CPU: the tasks that ran `spinBurstMs` without a voluntary sleep (a busy loop never sleeps
 * of its own accord; a browser's threads sleep between events), plus what no task read accounts for
 * (tasks that ended within the tick). The last `windowS` of samples make a session's window.
 * Reading tasks is the costly part (two small files a task, synchronous, on the daemon's event
 * loop), so they are read only of an undemoted session that used `spinScanCores` in its last tick,
 * has at most `spinScanMaxTasks` tasks and had no fork refused nor a bomb's ramp in it. Between ticks,
 * every `evidenceMs`, the guard reads the kernel's cheap evidence (a fork refused, an OOM kill, a
 * bomb's ramp in pids.current) and ticks at once on a change; and it reads the tasks of an idle
 * session that woke, so its next tick judges it.
 *
 * Contended. A rule demotes only while the host is contended for the session: the rest of the host
 * used at least `minCores` over the window, and that plus the session's full quota is at least
 * `busyShare` of the cores.
 *
 * Demotion: cpu.idle 1 where the kernel has it (5.15+), else a 16th of the weight; and a quota of
 * `capCores`. cpu.idle and the weight rank it only among its sibling sessions; the quota takes it
 * off the CPU. A reset ends a demotion, so does stop() (a daemon handing its sessions on); one
 * found demoted at the start (a daemon that died) is taken as demoted now. Same rules on cgroup v1
 * and v2 (the files: CPU_FILES_V1/V2 in host/cgroup-fs.ts).
 */
export interface CpuGuardOptions extends RuleOptions {
  windowS: number;
  /** A session is not judged for this long after it was created or reset (s). */
  graceS: number;
  /** Demoted sessions' quota (cores). */
  capCores: number;
  /** The host is contended for a session when the rest of the host's use plus the session's quota is at least this share of the cores. */
  busyShare: number;
  /** The fast verdict: a session throttled at its own quota in at least `fastThrottleShare` of its periods over the last `fastWindowS` is judged on that span, before its full window. */
  fastWindowS: number;
  fastThrottleShare: number;
  /** A demoted session with a fork refused or an OOM kill in this span (s) is not restored for being calm. */
  evidenceHoldS: number;
  /** How often the kernel's evidence (a fork refused, an OOM kill, a bomb's ramp) and idle sessions' wakes are read between ticks (ms). */
  evidenceMs: number;
  /** A task that ran at least this long over a tick without a voluntary sleep is spinning (ms). */
  spinBurstMs: number;
  /** A session's tasks are read only when it used at least this in its last tick (cores). */
  spinScanCores: number;
  /** ...and has at most this many tasks (pids.current). */
  spinScanMaxTasks: number;
  /** A session whose tasks (pids.current) rose by this many since the last tick forks at a bomb's rate. */
  forkRampTasks: number;
  /** Where the cgroup filesystem is, and its version, /proc/stat, /proc and the host's cores (for tests). */
  root: string;
  v2: boolean;
  procStat: string;
  proc: string;
  cores: number;
}

export const CPU_GUARD_DEFAULTS = {
  hogCores: 0.6,
  minCores: 0.2,
  ratio: 2.5,
  windowS: 2,
  graceS: 10,
  capCores: 0.03,
  busyShare: 0.8,
  releaseShare: 0.5,
  maxHoldS: 30,
  fastWindowS: 1,
  fastThrottleShare: 0.9,
  evidenceHoldS: 10,
  intervalMs: 500,
  evidenceMs: 100,
  spinTasksAtOnce: 4,
  kernelSpinShare: 0.75,
  spinBurstMs: 20,
  spinScanCores: 0.05,
  spinScanMaxTasks: 512,
  forkRampTasks: 256,
  root: CGROUP_ROOT,
  procStat: '/proc/stat',
  proc: '/proc',
};

/** A live session as the guard sees it: its cgroup path (`/drums-<inst>/sessions/<id>`) and its own CPU quota (cores; 0 = none). */
export interface GuardedSession {
  cgroup: string;
  cpus: number;
  /** Being created, reset or destroyed: not judged nor written, and its grace time starts when this ends. */
  starting?: boolean;
}

function read(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** The number after `key ` on a line of a cgroup file (cpu.stat, pids.events, memory.events), 0 without it. */
function counter(text: string | undefined, key: string): number {
  return Number(new RegExp(`^${key} (\\d+)$`, 'm').exec(text ?? '')?.[1] ?? 0);
}

interface Sample {
  /** ms */
  t: number;
  /** CPU time, ns */
  ns: number;
  /** cpu.stat nr_periods and nr_throttled */
  periods: number;
  throttled: number;
  /** Forks the pids controller refused at pids.max (pids.events max), and OOM kills in the cgroup (oom_kill). */
  refused: number;
  oomKills: number;
  /** Its tasks (pids.current; 0 where that can't be read). */
  tasks: number;
  /** System CPU time, ns (v1 in 10 ms steps). */
  sysNs: number;
  /** Spinning CPU since the sample before (ns; see the header), 0 without a task reading of that sample. */
  spinNs: number;
  /** How many of its tasks spun since the sample before (0 without a task reading). */
  spinTasks: number;
}

/** A task's CPU time (ns) and voluntary context switches. */
type TaskReading = Map<number, [number, number]>;

interface Track {
  cgroup: string;
  cpus: number;
  /** Samples, oldest first, covering the window. */
  samples: Sample[];
  demoted: boolean;
  /** When it was last demoted or restored (ms). */
  since: number;
  /** When the guard first saw this cgroup, or saw its counter start again (a reset) (ms). */
  born: number;
  /** How often it was demoted. */
  demotions: number;
  /** When the kernel last refused one of its forks at pids.max, or OOM-killed one of its processes (ms). */
  refusedAt?: number;
  oomAt?: number;
  /** When it was last restored after a demotion (ms). */
  restoredAt?: number;
  /** Its tasks as read at the last sample, if they were, or between ticks (see `tasksAt`). */
  tasks?: TaskReading;
  /** When `tasks` were read between ticks (ms), and the cgroup's CPU time then (ns): an idle session that woke. */
  tasksAt?: { t: number; ns: number };
}

/**
 * Over a sample window, in cores: the mean, the floor (the least of the per-tick rates) and the
 * spin floor (the least per-tick rate of spinning CPU); and the share of its CFS periods it was throttled in.
 */
function rates(samples: Sample[]): Rates {
  const a = samples[0]!;
  const b = samples.at(-1)!;
  let floor = Infinity;
  let spinFloor = Infinity;
  /** The fewest tasks that spun in any tick. */
  let spinTasks = Infinity;
  let spin = 0;
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i]!.t - samples[i - 1]!.t;
    if (dt <= 0) continue;
    floor = Math.min(floor, (samples[i]!.ns - samples[i - 1]!.ns) / 1e6 / dt);
    spinFloor = Math.min(spinFloor, samples[i]!.spinNs / 1e6 / dt);
    spinTasks = Math.min(spinTasks, samples[i]!.spinTasks);
    spin += samples[i]!.spinNs;
  }
  const periods = b.periods - a.periods;
  const span = b.t - a.t;
  return {
    mean: (b.ns - a.ns) / 1e6 / span,
    floor,
    spinMean: spin / 1e6 / span,
    spinFloor,
    spinTasks,
    throttledShare: periods > 0 ? (b.throttled - a.throttled) / periods : 0,
    sysShare: b.ns > a.ns ? (b.sysNs - a.sysNs) / (b.ns - a.ns) : 0,
    spanS: span / 1000,
  };
}

export class CpuGuard {
  private readonly _tracks = new Map<string, Track>();
  /** [time ms, busy cores·ms, total cores·ms] of the host (/proc/stat), oldest first, covering the window. */
  private _host: [number, number, number][] = [];
  private _timer: NodeJS.Timeout | undefined;
  private _poll: NodeJS.Timeout | undefined;
  readonly opts: CpuGuardOptions;
  /** Sessions demoted since start, for /metrics. */
  demotions = 0;
  /** Task (thread) readings taken since start: what the spin rule costs the daemon (tests). */
  tasksRead = 0;

  /** `cgroups()` gives the live sessions by id. */
  private readonly cgroups: () => Map<string, GuardedSession>;
  constructor(cgroups: () => Map<string, GuardedSession>, opts: Partial<CpuGuardOptions> = {}) {
    this.cgroups = cgroups;
    this.opts = { ...CPU_GUARD_DEFAULTS, v2: opts.v2 ?? cgroupMode() === 'v2', cores: opts.cores ?? hostCpus().length, ...opts };
  }

  start(): void {
    if (this._poll) return;
    this._schedule();
    this._poll = setInterval(() => {
      if (this.evidenceSince()) this._schedule(true);
    }, this.opts.evidenceMs);
    this._poll.unref();
  }

  /** The next tick in intervalMs, or (now) one at once and the next intervalMs after it. */
  private _schedule(now = false): void {
    clearTimeout(this._timer);
    if (now) this.tick(performance.now());
    this._timer = setTimeout(() => this._schedule(true), this.opts.intervalMs);
    this._timer.unref();
  }

  /**
   * Whether the kernel refused a fork at pids.max, or OOM-killed a process, since the last tick in a
   * session that is not demoted and used at least `spinScanCores` in its last tick (read between ticks,
   * every `evidenceMs`: two small files per busy session), or the tasks of an undemoted session out of
   * its grace rose by `forkRampTasks` (pids.current, one small file per session, busy or not). The
   * guard then ticks at once: a fork bomb runs at full speed until it is demoted, the worst time for
   * its neighbours, and the pids controller refuses its first fork within a second of its start.
   * On the way it reads the tasks of an undemoted session out of its grace that was idle in its last
   * tick and used `spinScanCores` since (its usage file, one more small file per idle session): the
   * start of what its next tick judges (exposed for tests).
   */
  evidenceSince(now = performance.now()): boolean {
    for (const t of this._tracks.values()) {
      const [a, b] = t.samples.slice(-2);
      if (t.demoted || !b || this._bounded(t)) continue;
      const graced = this._graced(t, now);
      // A bomb's ramp, from idle too (its first tick may be up to intervalMs away).
      const count = graced ? 0 : this._taskCount(t.cgroup);
      if (!graced && count - b.tasks >= this.opts.forkRampTasks) return true;
      if (a && !this._busy(a, b)) {
        // Idle in its last tick, so its tasks were not read there: woken since, they are read now, and
        // the next tick judges what they did from here, not a tick later (a hog started from idle).
        if (!graced && !t.tasks && count <= this.opts.spinScanMaxTasks) {
          const ns = this._ns(read(this._file('usage', t.cgroup)));
          if (this._busy(b, { ...b, t: now, ns })) {
            t.tasks = this._readTasks(t.cgroup, undefined);
            t.tasksAt = { t: now, ns };
          }
        }
        continue;
      }
      if (counter(read(this._file('pidsEvents', t.cgroup)), 'max') > b.refused) return true;
      // An OOM kill gives no verdict in the grace.
      if (!graced && counter(read(this._file('memEvents', t.cgroup)), 'oom_kill') > b.oomKills) return true;
    }
    return false;
  }

  /** Whether a session used at least spinScanCores between two samples (its tasks are worth reading). */
  private _busy(a: Sample, b: Sample): boolean {
    return b.t > a.t && (b.ns - a.ns) / 1e6 / (b.t - a.t) >= this.opts.spinScanCores;
  }

  /** A session's tasks (pids.current), 0 where that can't be read. */
  /** Whether a cgroup carries a demotion (its weight at the low value, or cpu.idle set). */
  private _looksDemoted(cgroup: string): boolean {
    return read(this._file('weight', cgroup))?.trim() === String((this.opts.v2 ? V2 : V1).low) || read(this._file('idle', cgroup))?.trim() === '1';
  }

  private _taskCount(cgroup: string): number {
    return Number(read(this._file('pidsCurrent', cgroup))?.trim()) || 0;
  }

  /** Its own quota bounds it below minCores: never demoted. */
  private _bounded(t: Track): boolean {
    return t.cpus > 0 && t.cpus < this.opts.minCores;
  }

  /** In its grace after its create or reset. */
  private _graced(t: Track, now: number): boolean {
    return now - t.born < this.opts.graceS * 1000;
  }

  /** Stops sampling and gives every demoted session back its own quota and the normal weight. */
  stop(): void {
    clearTimeout(this._timer);
    clearInterval(this._poll);
    this._timer = this._poll = undefined;
    for (const [id, t] of this._tracks) if (t.demoted) this._restore(id, t, 0);
  }

  /** Session ids demoted now. */
  demoted(): string[] {
    return [...this._tracks].filter(([, t]) => t.demoted).map(([id]) => id);
  }

  /** How often it demoted this session (0 for one it does not know). */
  demotionsOf(id: string): number {
    return this._tracks.get(id)?.demotions ?? 0;
  }

  private _file(kind: Exclude<keyof typeof V1, 'normal' | 'low' | 'tasksFile'>, cgroup: string): string {
    return join(this.opts.root, (this.opts.v2 ? V2 : V1)[kind].replace('%', cgroup));
  }

  /**
   * Every task (thread) in the session's cgroup and the groups below it: CPU time and voluntary switches.
   * A task that ran less than a millisecond since `prev` keeps its count from there (its status, the
   * larger file, is not read): whether it slept can't make it spin. A browser has ~100 tasks, a few busy.
   */
  private _readTasks(cgroup: string, prev: TaskReading | undefined): TaskReading {
    const out: TaskReading = new Map();
    const file = (this.opts.v2 ? V2 : V1).tasksFile;
    const walk = (dir: string, depth: number) => {
      for (const line of (read(join(dir, file)) ?? '').split('\n')) {
        const tid = Number(line);
        if (!line || !Number.isInteger(tid)) continue;
        const ns = Number(read(join(this.opts.proc, String(tid), 'schedstat'))?.split(' ')[0]);
        const was = prev?.get(tid);
        const vol =
          was && ns >= was[0] && ns - was[0] < 1e6
            ? was[1]
            : Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(read(join(this.opts.proc, String(tid), 'status')) ?? '')?.[1]);
        if (Number.isFinite(ns) && Number.isFinite(vol)) out.set(tid, [ns, vol]);
        this.tasksRead++;
      }
      if (depth > 8) return;
      let subs: string[] = [];
      try {
        subs = readdirSync(dir, { withFileTypes: true })
          .filter((e) => e.isDirectory())
          .map((e) => e.name);
      } catch {}
      for (const s of subs) walk(join(dir, s), depth + 1);
    };
    walk(this._file('tasks', cgroup), 0);
    return out;
  }

  /**
   * The spinning CPU (ns) between two readings of a session's tasks, over which its cgroup used `usedNs`:
   * the tasks that ran at least spinBurstMs without a voluntary sleep (one that started in between, over
   * its life), and the CPU of tasks that ended in between (what the cgroup used that no task read accounts
   * for): a loop that forks a short-lived process each time round, or a memory hog OOM-killed and started
   * again, leaves no task to read, and its parent sleeps in wait().
   */
  private _spin(before: TaskReading, after: TaskReading, usedNs: number, tickMs: number): { ns: number; tasks: number } {
    // spinBurstMs is per intervalMs: a tick out of schedule (a fork refused) is shorter.
    const burstNs = this.opts.spinBurstMs * 1e6 * Math.min(1, tickMs / this.opts.intervalMs);
    let spin = 0;
    let tasks = 0;
    let seen = 0;
    for (const [tid, [ns, vol]] of after) {
      const b = before.get(tid) ?? [0, 0];
      const ran = ns - b[0];
      if (ran <= 0) continue;
      seen += ran;
      if (vol === b[1] && ran >= burstNs) {
        spin += ran;
        tasks++;
      }
    }
    return { ns: Math.min(usedNs, spin + Math.max(0, usedNs - seen)), tasks };
  }

  /** A session's CPU time (ns) from its usage file's text (v1 cpuacct.usage, v2 cpu.stat), NaN without it. */
  private _ns(usage: string | undefined): number {
    if (usage === undefined) return NaN;
    return this.opts.v2 ? Number(/^usage_usec (\d+)$/m.exec(usage)?.[1] ?? NaN) * 1000 : Number(usage.trim());
  }

  /** One reading of a session's cgroup, or undefined when it is gone. */
  private _sample(now: number, cgroup: string): Sample | undefined {
    const usage = read(this._file('usage', cgroup));
    const ns = this._ns(usage);
    if (usage === undefined || !Number.isFinite(ns)) return undefined;
    const stat = (this.opts.v2 ? usage : read(this._file('stat', cgroup))) ?? '';
    const userSys = (this.opts.v2 ? usage : read(this._file('userSys', cgroup))) ?? '';
    return {
      t: now,
      ns,
      sysNs: this.opts.v2 ? counter(userSys, 'system_usec') * 1000 : counter(userSys, 'system') * 1e7,
      periods: counter(stat, 'nr_periods'),
      throttled: counter(stat, 'nr_throttled'),
      refused: counter(read(this._file('pidsEvents', cgroup)), 'max'),
      oomKills: counter(read(this._file('memEvents', cgroup)), 'oom_kill'),
      tasks: this._taskCount(cgroup),
      spinNs: 0,
      spinTasks: 0,
    };
  }

  /** The host's busy CPU over the window, in cores (undefined until there are two readings). */
  private _hostBusy(now: number): number | undefined {
    const f = read(this.opts.procStat)?.split('\n')[0]?.trim().split(/\s+/).slice(1).map(Number);
    if (f && f.length >= 4) {
      const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
      const busy = user + nice + system + irq + softirq + steal;
      this._host.push([now, busy, busy + idle + iowait]);
      while (this._host.length > 2 && now - this._host[1]![0] >= this.opts.windowS * 1000) this._host.shift();
    }
    if (this._host.length < 2) return undefined;
    const [, b0, t0] = this._host[0]!;
    const [, b1, t1] = this._host.at(-1)!;
    return t1 > t0 ? ((b1 - b0) / (t1 - t0)) * this.opts.cores : undefined;
  }

  /** Whether the host is contended for this session: the rest of the host wants some CPU, and it plus the session's full quota fill most of the cores. */
  private _contended(hostBusy: number | undefined, t: Track, used: number): boolean {
    if (hostBusy === undefined) return false;
    const rest = hostBusy - used;
    const quota = t.cpus > 0 ? Math.min(t.cpus, this.opts.cores) : this.opts.cores;
    return rest >= this.opts.minCores && rest + quota >= this.opts.busyShare * this.opts.cores;
  }

  /** One sample of every session (exposed for tests). */
  tick(now: number): void {
    const live = this.cgroups();
    const win = this.opts.windowS * 1000;
    for (const id of this._tracks.keys()) if (!live.has(id)) this._tracks.delete(id);
    const hostBusy = this._hostBusy(now);
    // 1. Each session's numbers over its window (none until the window is full).
    const use = new Map<string, Rates>();
    /** Each session's numbers over its last tick only. */
    const lastTick = new Map<string, Rates>();
    /** Sessions whose tasks rose by forkRampTasks in this tick. */
    const ramped = new Set<string>();
    for (const [id, s] of live) {
      // Being created or reset: runc is writing the new cgroup's weight, which the kernel refuses
      // (EINVAL) on a group the guard has made idle; so hands off. The new cgroup starts at the
      // defaults (a reset ends a demotion) and its grace starts when it is ready.
      if (s.starting) {
        const t = this._tracks.get(id);
        if (t) {
          t.born = now;
          t.samples = [];
          t.tasks = t.tasksAt = undefined;
          t.demoted = false;
          t.refusedAt = t.oomAt = t.restoredAt = undefined;
        }
        continue;
      }
      const sample = this._sample(now, s.cgroup);
      if (!sample) continue;
      let t = this._tracks.get(id);
      if (!t) {
        this._tracks.set(id, (t = { cgroup: s.cgroup, cpus: s.cpus, samples: [], demoted: false, since: now, born: now, demotions: 0 }));
        // Demoted by a daemon that died: demoted from now on, so the rule below restores it.
        t.demoted = this._looksDemoted(s.cgroup);
      }
      // A reset served by a standby moves the session to the standby's cgroup (another path, whose
      // counter need not be lower): the same fresh start as below, and a demotion the standby got
      // as a session of its own ends too.
      const moved = t.cgroup !== s.cgroup;
      if (moved) t.demoted ||= this._looksDemoted(s.cgroup);
      t.cgroup = s.cgroup;
      t.cpus = s.cpus;
      // A reset makes a new cgroup: its counter starts again from 0. The new desktop starts
      // clean (its own quota, the default weight) and gets its grace time; the demotion ends.
      if (moved || (t.samples.length && sample.ns < t.samples.at(-1)!.ns)) {
        t.samples = [];
        t.born = now;
        if (t.demoted) this._restore(id, t, now);
        t.refusedAt = t.oomAt = t.restoredAt = undefined;
      }
      const last = t.samples.at(-1);
      // Its tasks, at its first sample and when it was busy in this tick: the spinning CPU since the tick before.
      // Not while demoted: it is judged on the kernel's counts then.
      const busy = !t.demoted && (last === undefined || this._busy(last, sample));
      const ramp = last !== undefined && sample.tasks - last.tasks >= this.opts.forkRampTasks && !this._graced(t, now);
      const refused = last !== undefined && sample.refused > last.refused;
      const tasks = busy && !ramp && !refused && sample.tasks <= this.opts.spinScanMaxTasks ? this._readTasks(s.cgroup, t.tasks) : undefined;
      if (tasks && t.tasks && last) {
        // Since the last sample, or since the tasks were read between ticks (the session woke from idle).
        const from = t.tasksAt ?? last;
        const spun = this._spin(t.tasks, tasks, sample.ns - from.ns, sample.t - from.t);
        sample.spinNs = spun.ns;
        sample.spinTasks = spun.tasks;
      }
      t.tasks = tasks;
      t.tasksAt = undefined;
      if (refused) t.refusedAt = now;
      if (ramp) ramped.add(id);
      if (last && sample.oomKills > last.oomKills) t.oomAt = now;
      t.samples.push(sample);
      while (t.samples.length > 2 && now - t.samples[1]!.t >= win) t.samples.shift();
      const full = now - t.samples[0]!.t >= win * 0.9;
      if (full) use.set(id, rates(t.samples));
      if (!t.demoted) {
        // The fast verdict's span: the samples of the last fastWindowS, judged early when the session
        // sits at its own quota (throttled in most periods), or several of its tasks spun in every tick.
        const fast = t.samples.filter((x) => now - x.t <= this.opts.fastWindowS * 1000 * 1.05);
        if (fast.length >= 2 && (!full || fast.length < t.samples.length) && now - fast[0]!.t >= this.opts.fastWindowS * 1000 * 0.9) {
          const r = rates(fast);
          const threads = r.spinTasks >= 2 && r.spinFloor >= this.opts.minCores;
          if ((!full && r.throttledShare >= this.opts.fastThrottleShare) || threads) use.set(id, r);
        }
      }
      if (t.samples.length >= 2) lastTick.set(id, rates(t.samples.slice(-2)));
    }
    // 2. Verdicts (cpu-rules.ts).
    const undemoted = [...use].filter(([id]) => !this._tracks.get(id)!.demoted);
    for (const [id, s] of live) {
      const t = this._tracks.get(id);
      if (!t || s.starting) continue;
      const u = use.get(id);
      if (t.demoted) {
        const hold = this.opts.evidenceHoldS * 1000;
        const stillAbusing = (t.refusedAt !== undefined && now - t.refusedAt < hold) || (t.oomAt !== undefined && now - t.oomAt < hold);
        const contended = u !== undefined && this._contended(hostBusy, t, u.mean);
        if (release({ window: u, heldMs: now - t.since, stillAbusing, contended }, this.opts)) this._restore(id, t, now);
        else this._write(id, t, true, u?.mean ?? 0); // again, should anything have put the weight back
        continue;
      }
      const verdict = judge(
        {
          tick: lastTick.get(id),
          window: u,
          others: undemoted.filter(([o]) => o !== id).map(([, c]) => c.spinMean),
          forkRefused: t.refusedAt === now,
          forkRamp: ramped.has(id),
          oomKilled: t.oomAt === now,
          restoredLately: t.restoredAt !== undefined && now - t.restoredAt < this.opts.maxHoldS * 1000,
          graced: this._graced(t, now),
          bounded: this._bounded(t),
        },
        this.opts,
      );
      if (!verdict || !this._contended(hostBusy, t, Math.max(verdict.on.mean, u?.mean ?? 0))) continue;
      // What the verdict rested on, for the log: the span's CPU, its spinning tasks, and the span.
      const r = verdict.on;
      this._write(id, t, true, verdict.cores, verdict.why, { mean: r.mean, spinTasks: r.spinTasks, spanS: r.spanS });
      t.demoted = true;
      t.since = now;
      // Judged again on what comes after the demotion only.
      t.samples = t.samples.slice(-1);
      t.demotions++;
      this.demotions++;
    }
  }

  private _restore(id: string, t: Track, now: number): void {
    this._write(id, t, false, 0);
    t.demoted = false;
    t.since = t.restoredAt = now;
    t.samples = t.samples.slice(-1);
  }

  private _write(id: string, t: Track, low: boolean, cores: number, why = 'it keeps the CPU busy', detail: Record<string, number> = {}): void {
    const k = this.opts.v2 ? V2 : V1;
    const weight = this._file('weight', t.cgroup);
    const idle = this._file('idle', t.cgroup);
    const quotaFile = this._file('quota', t.cgroup);
    const value = String(low ? k.low : k.normal);
    try {
      // The CFS period: v1 its own file, v2 the second field of cpu.max.
      const period = Number((this.opts.v2 ? read(quotaFile)?.trim().split(/\s+/)[1] : read(this._file('period', t.cgroup))?.trim()) ?? 100_000) || 100_000;
      const own = t.cpus > 0 ? String(Math.round(t.cpus * period)) : this.opts.v2 ? 'max' : '-1';
      const cap = String(Math.max(1000, Math.round(Math.min(this.opts.capCores, t.cpus > 0 ? t.cpus : Infinity) * period)));
      const quota = low ? cap : own;
      const quotaText = this.opts.v2 ? `${quota} ${period}` : quota;
      const idleNow = existsSync(idle) ? read(idle)?.trim() : undefined;
      const quotaNow = read(quotaFile)?.trim();
      const weightNow = read(weight)?.trim();
      // With cpu.idle 1 the kernel gives the group the idle weight (cpu.shares reads 3, and writing it
      // is EINVAL), and cpu.idle 0 puts back the default: the weight is written only without cpu.idle, or on restore.
      const rankOk = idleNow === undefined ? weightNow === value : low ? idleNow === '1' : idleNow === '0' && weightNow === value;
      if (rankOk && (quotaNow === undefined || quotaNow === quotaText)) return;
      if (low) {
        // The quota first, so the hog is off the CPU at once; then its rank among its siblings.
        if (quotaNow !== undefined) writeFileSync(quotaFile, quotaText);
        if (idleNow === undefined) writeFileSync(weight, value);
        else if (idleNow !== '1') writeFileSync(idle, '1');
      } else {
        if (idleNow !== undefined && idleNow !== '0') writeFileSync(idle, '0');
        if (read(weight)?.trim() !== value) writeFileSync(weight, value);
        if (quotaNow !== undefined) writeFileSync(quotaFile, quotaText);
      }
      log('info', low ? `session demoted: ${why}` : 'session restored to its CPU quota and the normal weight', {
        session: id,
        cores: Math.round(cores * 100) / 100,
        ...Object.fromEntries(Object.entries(detail).map(([k, v]) => [k, Number.isFinite(v) ? Math.round(v * 100) / 100 : v])),
      });
    } catch (e) {
      log('warn', 'CPU guard could not write a session cgroup', { session: id, error: String(e) });
    }
  }
}
