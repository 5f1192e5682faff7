// Running OSWorld's guest-side work inside a session through the session's
// one exec primitive (src/session/exec.ts), with binary stdin/stdout, as the
// desktop user or, for commands that use sudo, as root-in-session with the
// osworld image's sudo shim first on PATH (and the desktop user's HOME and
// working directory, as OSWorld's sudo commands expect).

import type { ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { DESKTOP_ENV, DESKTOP_HOME } from '../session/desktop-user.ts';
import { runInSession, spawnInSession, type Target } from '../session/exec.ts';
import type { Session, SessionManager } from '../session/manager.ts';

export const SUDO_SHIM_DIR = '/usr/lib/drums/osworld/bin';
export const HOME = DESKTOP_HOME;

export interface GuestRun {
  argv: string[];
  root?: boolean;
  stdin?: Buffer | string;
  /** Streams stdin instead (runInSession's `feed`). */
  feed?: (stdin: Writable) => void;
  timeoutMs: number;
  cwd?: string;
  /** Merge stderr into stdout in the order written (one pipe inside the session, like Popen's stderr=STDOUT). */
  mergeStderr?: boolean;
  maxOutputBytes?: number;
  /** Aborts the command (SIGKILL to the runtime's exec process). */
  signal?: AbortSignal;
}

export interface GuestResult {
  code: number;
  stdout: Buffer;
  stderr: string;
  timedOut: boolean;
}

const DEFAULT_MAX_OUTPUT = 256 * 1024 * 1024;

function target(mgr: SessionManager, s: Session): Target {
  return { runtime: mgr.runtime, container: s.names.container };
}

/** Root keeps the desktop user's HOME (and cwd) and finds the sudo shim first. */
function guestEnv(root: boolean): Record<string, string> | undefined {
  return root ? { PATH: `${SUDO_SHIM_DIR}:${DESKTOP_ENV.PATH}`, HOME } : undefined;
}

/** Spawns argv in the session (with `timeoutMs`, under the in-session timeout): the caller owns the process. */
export function spawnGuest(mgr: SessionManager, s: Session, argv: string[], opts: { root?: boolean; cwd?: string; timeoutMs?: number } = {}): ChildProcess {
  const root = opts.root === true;
  return spawnInSession(target(mgr, s), { argv, root, cwd: opts.cwd ?? HOME, env: guestEnv(root), timeoutMs: opts.timeoutMs });
}

/** Runs argv in the session with a timeout enforced inside (coreutils timeout) and outside. */
export async function runGuest(mgr: SessionManager, s: Session, req: GuestRun): Promise<GuestResult> {
  const root = req.root === true;
  const r = await runInSession(target(mgr, s), {
    argv: req.argv,
    root,
    cwd: req.cwd ?? HOME,
    env: guestEnv(root),
    stdin: req.stdin,
    feed: req.feed,
    timeoutMs: req.timeoutMs,
    mergeStderr: req.mergeStderr,
    maxOutputBytes: req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT,
    signal: req.signal,
  });
  return { code: r.exitCode, stdout: r.stdout, stderr: r.stderr.toString('utf8'), timedOut: r.timedOut };
}
