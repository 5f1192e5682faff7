/**
 * Fair share of the daemon between sessions. A session's observe/act work
 * (screenshots and their encodes, actions, the accessibility tree, windows,
 * files; the same on the OSWorld guest routes) costs the daemon's one event
 * loop and its encoder threads; without this, one client flooding its own
 * session takes the daemon from every other session. One scheduler, built by the
 * daemon, serves the API and the guest listeners. At most `slots` such
 * requests run at once, and:
 *  - while other sessions are active, a session runs one request at a time;
 *    the rest wait in its own queue, in order;
 *  - a session with waiting requests starts the next one only while it has
 *    used at most `leadMs` of daemon time more than the least-served active
 *    session (a virtual clock: a flood gets what each closed-loop client gets,
 *    not every slot its neighbours leave free between two of their requests).
 *    A request is charged its time in the slot but at least `turnMs`: what a
 *    request costs the daemon outside its slot (the HTTP parse, the token, the
 *    metrics, writing the answer) is not timed there, and a flood of cheap
 *    requests (an unchanged screen's cached PNG: ~2 ms in the slot) costs the
 *    daemon mostly that. So up to turnMs the clock counts turns (round robin:
 *    one request per session per round), beyond it daemon time. A request
 *    sent while another of the same session's was in (a backlog) is charged
 *    `backlogCharge` (4) times that: a closed-loop client never sends one,
 *    and a session that does asks for more than its turn. At one turn a
 *    backlog, a flood of screenshots on one id was served like a ninth
 *    victim of the noisy bench (~105 a second), whose eight took 7-15% fewer
 *    steps a second for it (noisy-2026-12-05T15-23-49);
 *  - a freed slot goes to the waiting session that has used the least.
 * "Active" is running, waiting, or done less than `lingerMs` ago: a
 * closed-loop client's gap between an answer and its next request does not
 * hand its share to a flood, while a client that thinks for longer leaves the
 * daemon to whoever asks (and comes back level with the least-served active
 * session, so idleness banks no credit). A lone session gets every slot.
 * A session with more than `maxQueue` waiting gets 429 `rate_limited`
 * (details.scope 'session', Retry-After) at once. A client that sends one
 * request at a time per session never waits behind its own requests and is
 * never refused.
 */
import { cpus } from 'node:os';
import { FIELDS } from '../common/config.ts';
import { DrumsError } from '../common/errors.ts';

export interface FairShareOptions {
  slots: number;
  maxQueue: number;
  /** How long a session stays active after its last request ends (ms). */
  lingerMs?: number;
  /** How far (ms of daemon time) a session may run ahead of the least-served active one. */
  leadMs?: number;
  /** The least a request is charged (ms), however short its time in the slot. */
  turnMs?: number;
  /** What a request sent while another of its session's was in is charged, in times its own. */
  backlogCharge?: number;
  /** The clock (ms; default performance.now): a test drives a virtual one, so a loaded host can't change what it sees. */
  now?: () => number;
}

export const FAIR_LINGER_MS = 250;
export const FAIR_TURN_MS = 20;
export const FAIR_LEAD_MS = FAIR_TURN_MS;
export const FAIR_BACKLOG_CHARGE = 4;
/** The Retry-After (s) of a refusal: a queue that deep drains in well under that. */
export const FAIR_RETRY_AFTER_S = 1;

/** The share from the daemon's config: DRUMS_FAIR_SLOTS (default max(4, 2 × cores)) and DRUMS_FAIR_QUEUE. */
export function fairShareOf(
  c: { fairSlots: number | undefined; fairQueue: number } = { fairSlots: FIELDS.fairSlots.default, fairQueue: FIELDS.fairQueue.default },
): FairShareOptions {
  return { slots: c.fairSlots ?? Math.max(4, 2 * cpus().length), maxQueue: c.fairQueue };
}

/** One session's requests: how many run, who waits, how much daemon time it has used (ms), and since when it is idle. */
interface Lane {
  running: number;
  /** Each waiting request's wake-up, and whether it came while the session had another one in (a backlog). */
  waiting: { wake: () => void; backlog: boolean }[];
  used: number;
  /** The clock when it last went idle (nothing running or waiting); undefined while busy. */
  idleSince: number | undefined;
}

export class FairScheduler {
  private _busy = 0;
  private readonly _lanes = new Map<string, Lane>();
  private _timer: ReturnType<typeof setTimeout> | undefined;
  /** Per session: bounded() work in flight. */
  private readonly _inflight = new Map<string, number>();
  readonly opts: Required<FairShareOptions>;
  constructor(opts: FairShareOptions) {
    this.opts = {
      lingerMs: FAIR_LINGER_MS,
      leadMs: FAIR_LEAD_MS,
      turnMs: FAIR_TURN_MS,
      backlogCharge: FAIR_BACKLOG_CHARGE,
      now: () => performance.now(),
      ...opts,
    };
  }

  /** Requests of `session` waiting now (for tests and /metrics). */
  waiting(session: string): number {
    return this._lanes.get(session)?.waiting.length ?? 0;
  }

  /** Sessions the scheduler tracks (active or lingering). */
  get lanes(): number {
    return this._lanes.size;
  }

  /** Requests holding a slot, requests waiting (all sessions), and sessions tracked: for /metrics. */
  stats(): { running: number; waiting: number; sessions: number; commands: number } {
    this._expire(this.opts.now());
    let waiting = 0;
    for (const l of this._lanes.values()) waiting += l.waiting.length;
    let commands = 0;
    for (const n of this._inflight.values()) commands += n;
    return { running: this._busy, waiting, sessions: this._lanes.size, commands };
  }

  /**
   * Work that runs in the session's own cgroup and may take long (exec, the guest's command
   * routes): it takes no slot and is not paced, but a session may have at most maxQueue of it in
   * flight; one more gets the same 429 as a full queue.
   */
  async bounded<T>(session: string, fn: () => Promise<T>): Promise<T> {
    const n = this._inflight.get(session) ?? 0;
    if (n >= this.opts.maxQueue) {
      throw new DrumsError(
        'rate_limited',
        `session '${session}' already has ${n} commands running (at most ${this.opts.maxQueue}); wait for one to end before starting another, or retry after ${FAIR_RETRY_AFTER_S} s`,
        { details: { scope: 'session', running: n, maxQueue: this.opts.maxQueue, retryAfterSeconds: FAIR_RETRY_AFTER_S } },
      );
    }
    this._inflight.set(session, n + 1);
    try {
      return await fn();
    } finally {
      const left = (this._inflight.get(session) ?? 1) - 1;
      if (left > 0) this._inflight.set(session, left);
      else this._inflight.delete(session);
    }
  }

  async run<T>(session: string, fn: () => Promise<T>): Promise<T> {
    this._expire(this.opts.now());
    let lane = this._lanes.get(session);
    if (!lane) {
      // Level with the least-served active session: time spent idle is not credit.
      lane = { running: 0, waiting: [], used: this._floor() ?? 0, idleSince: undefined };
      this._lanes.set(session, lane);
    }
    lane.idleSince = undefined;
    const backlog = lane.running > 0 || lane.waiting.length > 0;
    if (!lane.waiting.length && this._busy < this.opts.slots && (!backlog || this._alone(lane))) {
      this._busy++;
      lane.running++;
    } else {
      if (lane.waiting.length >= this.opts.maxQueue) {
        throw new DrumsError(
          'rate_limited',
          `session '${session}' already has ${lane.waiting.length} requests waiting (at most ${this.opts.maxQueue}); send one request at a time per session (wait for each answer), or retry after ${FAIR_RETRY_AFTER_S} s`,
          { details: { scope: 'session', waiting: lane.waiting.length, maxQueue: this.opts.maxQueue, retryAfterSeconds: FAIR_RETRY_AFTER_S } },
        );
      }
      // The dispatcher counts it as running when it wakes it.
      await new Promise<void>((wake) => lane!.waiting.push({ wake, backlog }));
    }
    const t0 = this.opts.now();
    try {
      return await fn();
    } finally {
      const now = this.opts.now();
      lane.used += Math.max(now - t0, this.opts.turnMs) * (backlog ? this.opts.backlogCharge : 1);
      lane.running--;
      this._busy--;
      if (!lane.running && !lane.waiting.length) lane.idleSince = now;
      this._dispatch();
    }
  }

  /** The least daemon time used by an active session. */
  private _floor(): number | undefined {
    let floor: number | undefined;
    for (const l of this._lanes.values()) if (floor === undefined || l.used < floor) floor = l.used;
    return floor;
  }

  /** Forgets sessions idle for longer than lingerMs. */
  private _expire(now: number): void {
    for (const [k, l] of this._lanes) if (l.idleSince !== undefined && now - l.idleSince > this.opts.lingerMs) this._lanes.delete(k);
  }

  /**
   * Whether a session's next waiting request may start: always when no other session is active;
   * else only when it runs none, and, for a request sent while another of its own was in (a
   * backlog), only while it is not more than leadMs ahead of the least-served active session.
   */
  private _mayRun(lane: Lane, floor: number): boolean {
    if (this._alone(lane)) return true;
    if (lane.running) return false;
    return !lane.waiting[0]!.backlog || lane.used <= floor + this.opts.leadMs;
  }

  private _alone(lane: Lane): boolean {
    for (const l of this._lanes.values()) if (l !== lane) return false;
    return true;
  }

  /** Fills free slots from the waiting sessions, least-served first. */
  private _dispatch(): void {
    const now = this.opts.now();
    this._expire(now);
    while (this._busy < this.opts.slots) {
      const floor = this._floor() ?? 0;
      let pick: Lane | undefined;
      let held = false;
      for (const l of this._lanes.values()) {
        if (!l.waiting.length) continue;
        if (!this._mayRun(l, floor)) {
          held = true;
          continue;
        }
        if (!pick || l.running < pick.running || (l.running === pick.running && l.used < pick.used)) pick = l;
      }
      if (!pick) {
        // Held back only by sessions that may have gone quiet: look again when the first of them expires.
        if (held && !this._timer) {
          let next = Number.POSITIVE_INFINITY;
          for (const l of this._lanes.values()) if (l.idleSince !== undefined) next = Math.min(next, l.idleSince + this.opts.lingerMs + 1 - now);
          if (Number.isFinite(next)) {
            this._timer = setTimeout(
              () => {
                this._timer = undefined;
                this._dispatch();
              },
              Math.max(1, Math.ceil(next)),
            );
            this._timer.unref?.();
          }
        }
        return;
      }
      this._busy++;
      pick.running++;
      pick.idleSince = undefined;
      pick.waiting.shift()!.wake();
    }
  }
}
