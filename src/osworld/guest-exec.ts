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
  /** Cap on stdout plus stderr (default GUEST_OUTPUT_BYTES); a command that writes past it is stopped (`overflow`). */
  maxOutputBytes?: number;
  /** Aborts the command (SIGKILL to the runtime's exec process). */
  signal?: AbortSignal;
}

export interface GuestResult {
  code: number;
  stdout: Buffer;
  stderr: string;
  timedOut: boolean;
  /**
   * The command wrote past maxOutputBytes and was stopped there (its pipes closed, then TERM): `stdout` and
   * `stderr` are empty (what was read is dropped at once), and the route answers an error instead of a result.
   */
  overflow: boolean;
}

/**
 * What the daemon holds of one guest command's output: the bytes, then the string and the JSON of the reply
 * (OSWorld's server returns output inside JSON, so nothing here can stream). 64 MiB is far past real output (an
 * agent's pyautogui prints nothing; a getter's `cat` of a config or a document is kilobytes to a few MiB) and
 * short of what a loop printing forever builds before its timeout. Files go through /file, which streams.
 */
export const GUEST_OUTPUT_BYTES = 64 * 1024 * 1024;

/** The message of a command stopped at its output cap: the reply's `message` or `error`. */
export function overflowMessage(cap: number): string {
  return `the command's output went past ${cap} bytes (${Math.round(cap / 1024 ** 2)} MiB) and it was stopped there; write large output to a file and fetch it with /file`;
}

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
    maxOutputBytes: req.maxOutputBytes ?? GUEST_OUTPUT_BYTES,
    killOnOverflow: true,
    signal: req.signal,
  });
  return { code: r.exitCode, stdout: r.stdout, stderr: r.stderr.toString('utf8'), timedOut: r.timedOut, overflow: r.truncated };
}
