/**
 * The session record: everything the daemon knows about one session (the wire view is built
 * from it in src/api/routes/sessions.ts). Fields starting with `_` are the daemon's own handles
 * and seeds, never shown to clients.
 */
import type { Subnet } from '../host/network.ts';
import type { objectNames } from '../host/instance.ts';
import type { ProcIdentity } from '../host/proc.ts';
import type { UidRange } from '../host/userns.ts';
import type { SessionSpec } from './spec.ts';
import type { StatusWatcher } from './status-watcher.ts';
import type { EpisodeRecorder } from './episodes.ts';

export type SessionState = 'creating' | 'ready' | 'resetting' | 'broken' | 'destroying';

export interface Attempt {
  generation: number;
  token: string;
}

/** Everything the daemon knows about one session. */
export interface Session {
  id: string;
  state: SessionState;
  spec: SessionSpec;
  generation: number;
  attempt: Attempt;
  createdAt: string;
  subnet: Subnet;
  /** The session's host uid range (its own user namespace), or undefined: host ids (src/session/userns.ts). */
  uids?: UidRange;
  names: ReturnType<typeof objectNames>;
  /**
   * The key of the session's host objects (its directory, runtime dir, container, netns, cgroup and
   * claims are named with it); undefined: its id. A reset served by a standby takes over the standby's
   * objects, so it is then the standby's slot (`<id>-<hex>`: still named with the session's id).
   */
  slot?: string;
  /** Set on a standby: the id of the session it stands by for (its host name and DRUMS_SESSION_ID); hidden from clients. */
  standbyOf?: string;
  /** On a session with `spec.standbys`: its standbys' upkeep (src/session/standby.ts). */
  _standby?: StandbyState;
  dir: string;
  runDir: string;
  x11Socket: string;
  /** This generation's MIT-MAGIC-COOKIE-1 (hex) for the session's X server (src/session/x-auth.ts); none in a session adopted from a daemon before cookies. */
  xCookie?: string;
  busSocket: string;
  imageDir: string;
  initPid?: number;
  /** The init's PID and start time: the session's liveness is polled on it (no host fd reaches a session: it stays checkpointable). */
  init?: ProcIdentity;
  /** Adopted from a previous daemon of this instance. */
  adopted?: boolean;
  timings: Record<string, number>;
  brokenReason?: string;
  /** Private: status watcher of the current generation. */
  _watcher?: StatusWatcher;
  _ttlTimer?: NodeJS.Timeout;
  /** Private: a writable layer to start the first generation from (a disk fork, src/pools/fork.ts). */
  _seedUpper?: string;
  /** Private: the host uid base the seed's files are owned by (0: host ids). */
  _seedBase?: number;
  /** The session disk's loop device (this generation's). */
  _disk?: { major: number; minor: number };
  /** The recorder of this generation's episode (spec `record`; src/session/episodes.ts), else undefined: every hook is `s._episode?.x()`. */
  _episode?: EpisodeRecorder;
  /** Private: a checkpoint to restore the first generation from instead of booting it (a memory fork, src/session/memfork.ts). */
  _restore?: RestoreSeed;
}

/** A session's standbys (src/session/standby.ts): ready ones by id, and the work under way (makes, recycles). */
export interface StandbyState {
  ready: string[];
  making: number;
  failures: number;
  lastError?: string;
  retryTimer?: NodeJS.Timeout;
  /** Standby makes and old containers being recycled: a destroy waits for them, so nothing of the session outlives it. */
  pending: Set<Promise<unknown>>;
}

/** The key of a session's host objects (see Session.slot). */
export function slotOf(s: Pick<Session, 'id' | 'slot'>): string {
  return s.slot ?? s.id;
}

/** The id a session's processes see (host name, DRUMS_SESSION_ID, X authority): a standby's is its owner's. */
export function identityOf(s: Pick<Session, 'id' | 'standbyOf'>): string {
  return s.standbyOf ?? s.id;
}

/** How a memory-forked copy's first generation comes from a checkpoint (src/session/memfork.ts). */
export interface RestoreSeed {
  /** The source's X cookie: the restored X server has it in memory. */
  xCookie?: string;
  /** After the copy's upper layer is seeded: its run and X11 directories, identity fix-ups. */
  seed(s: Session): Promise<void>;
  /** Instead of the runtime's start: the restore of the checkpoint into the copy's bundle. */
  start(s: Session, bundle: string, logFile: string): Promise<{ pid: number }>;
}
