import type { MiddlewareHandler } from 'hono';
import { cpus } from 'node:os';
import { DrumsError } from '../../common/errors.ts';

/**
 * Fair share of the daemon between sessions. The observe/act routes of a
 * session (screenshots, actions, the accessibility tree, windows, files) cost
 * the daemon CPU; without this, one client flooding its own session takes the
 * daemon from every other session. Here at most `slots` such requests run at
 * once, and:
 *  - while other sessions are active (running or waiting), a session runs one
 *    request at a time; the rest wait in its own queue, in order;
 *  - a freed slot goes to the waiting session that has used the least daemon
 *    time (start fair queueing: a session that becomes active starts level
 *    with the least-served active one, so idleness banks no credit).
 * So a flood on one id costs the others about what one more well-behaved
 * client would, however many connections it opens. Work-conserving: a lone
 * session still gets every slot. A session with more than `maxQueue` waiting
 * requests gets 429 `rate_limited` (details.scope 'session') at once.
 * Streams and exec (whose work runs in the session's own cgroup) are not queued.
 */
export interface FairShareOptions {
  slots: number;
  maxQueue: number;
}

/** The share from the daemon's config: DRUMS_FAIR_SLOTS (default max(4, 2 × cores)) and DRUMS_FAIR_QUEUE. */
export function fairShareOf(c: { fairSlots: number | undefined; fairQueue: number }): FairShareOptions {
  return { slots: c.fairSlots ?? Math.max(4, 2 * cpus().length), maxQueue: c.fairQueue };
}

const QUEUED = /^\/v1\/sessions\/([^/]+)\/(screenshot|actions|a11y|windows|files|terminal)(\/|$)/;

/** One session's requests: how many run, who waits, and how much daemon time it has used (ms). */
interface Lane {
  running: number;
  waiting: (() => void)[];
  used: number;
}

export class FairScheduler {
  private _busy = 0;
  private readonly _lanes = new Map<string, Lane>();
  readonly opts: FairShareOptions;
  constructor(opts: FairShareOptions) {
    this.opts = opts;
  }

  async run<T>(session: string, fn: () => Promise<T>): Promise<T> {
    let lane = this._lanes.get(session);
    if (!lane) {
      // Level with the least-served active session: time spent idle is not credit.
      let floor = Number.POSITIVE_INFINITY;
      for (const l of this._lanes.values()) floor = Math.min(floor, l.used);
      lane = { running: 0, waiting: [], used: Number.isFinite(floor) ? floor : 0 };
      this._lanes.set(session, lane);
    }
    if (!lane.waiting.length && this._busy < this.opts.slots && this._mayRun(lane)) {
      this._busy++;
      lane.running++;
    } else {
      if (lane.waiting.length >= this.opts.maxQueue) {
        throw new DrumsError('rate_limited', `session '${session}' has ${lane.waiting.length} requests waiting; wait for answers before sending more`, {
          details: { scope: 'session', waiting: lane.waiting.length },
        });
      }
      // The dispatcher counts it as running when it wakes it.
      await new Promise<void>((resolve) => lane!.waiting.push(resolve));
    }
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      lane.used += performance.now() - t0;
      lane.running--;
      this._busy--;
      if (!lane.running && !lane.waiting.length) this._lanes.delete(session);
      this._dispatch();
    }
  }

  /** A session runs a second request at once only while no other session is active. */
  private _mayRun(lane: Lane): boolean {
    if (lane.running === 0) return true;
    for (const l of this._lanes.values()) if (l !== lane && (l.running || l.waiting.length)) return false;
    return true;
  }

  /** Fills free slots from the waiting sessions, least-served first. */
  private _dispatch(): void {
    while (this._busy < this.opts.slots) {
      let pick: Lane | undefined;
      for (const l of this._lanes.values()) {
        if (!l.waiting.length || !this._mayRun(l)) continue;
        if (!pick || l.running < pick.running || (l.running === pick.running && l.used < pick.used)) pick = l;
      }
      if (!pick) return;
      this._busy++;
      pick.running++;
      pick.waiting.shift()!();
    }
  }
}

export function fairShare(opts: FairShareOptions): MiddlewareHandler {
  const sched = new FairScheduler(opts);
  return async (c, next) => {
    const m = QUEUED.exec(c.req.path);
    if (!m || (m[2] === 'actions' && c.req.query('stream'))) return next();
    // The key only groups requests: a malformed escape (%ff) keys on the raw id, and the route answers it.
    let id = m[1]!;
    try {
      id = decodeURIComponent(id);
    } catch {}
    await sched.run(id, () => next());
  };
}
