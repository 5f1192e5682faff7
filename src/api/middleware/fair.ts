import type { MiddlewareHandler } from 'hono';
import { cpus } from 'node:os';
import { DrumsError } from '../../common/errors.ts';

/**
 * Fair share of the daemon between sessions. The observe/act routes of a
 * session (screenshots, actions, the accessibility tree, windows, files) cost
 * the daemon CPU; without this, one client flooding its own session takes the
 * daemon from every other session. Here at most `slots` such requests run at
 * once, and when they are all busy the next one is taken from the sessions in
 * turn (round robin), so a flood on one id waits in that session's own queue
 * and gets about one slot in (1 + active sessions). Work-conserving: a lone
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

export class FairScheduler {
  private _busy = 0;
  private readonly _queues = new Map<string, (() => void)[]>();
  /** Sessions with waiting requests, in turn order. */
  private readonly _turn: string[] = [];
  readonly opts: FairShareOptions;
  constructor(opts: FairShareOptions) {
    this.opts = opts;
  }

  async run<T>(session: string, fn: () => Promise<T>): Promise<T> {
    if (this._busy >= this.opts.slots) {
      let q = this._queues.get(session);
      if (!q) {
        this._queues.set(session, (q = []));
        this._turn.push(session);
      }
      if (q.length >= this.opts.maxQueue) {
        throw new DrumsError('rate_limited', `session '${session}' has ${q.length} requests waiting; wait for answers before sending more`, {
          details: { scope: 'session', waiting: q.length },
        });
      }
      await new Promise<void>((resolve) => q!.push(resolve));
    } else {
      this._busy++;
    }
    try {
      return await fn();
    } finally {
      this._next();
    }
  }

  /** Hands the freed slot to the next session in turn (the slot stays busy), or frees it. */
  private _next(): void {
    const id = this._turn.shift();
    if (id === undefined) {
      this._busy--;
      return;
    }
    const q = this._queues.get(id)!;
    const wake = q.shift()!;
    if (q.length) this._turn.push(id);
    else this._queues.delete(id);
    wake();
  }
}

export function fairShare(opts: FairShareOptions): MiddlewareHandler {
  const sched = new FairScheduler(opts);
  return async (c, next) => {
    const m = QUEUED.exec(c.req.path);
    if (!m || (m[2] === 'actions' && c.req.query('stream'))) return next();
    await sched.run(decodeURIComponent(m[1]!), () => next());
  };
}
