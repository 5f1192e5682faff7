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
  /** Private: a writable layer to start the first generation from (a disk fork, src/session/fork.ts). */
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

/** How a memory-forked copy's first generation comes from a checkpoint (src/session/memfork.ts). */
export interface RestoreSeed {
  /** The source's X cookie: the restored X server has it in memory. */
  xCookie?: string;
  /** After the copy's upper layer is seeded: its run and X11 directories, identity fix-ups. */
  seed(s: Session): Promise<void>;
  /** Instead of the runtime's start: the restore of the checkpoint into the copy's bundle. */
  start(s: Session, bundle: string, logFile: string): Promise<{ pid: number }>;
}
