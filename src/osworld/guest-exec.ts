// Running OSWorld's guest-side work inside a session, through the OCI runtime
// (the session's namespaces, cgroup, seccomp and no_new_privs), with binary
// stdin/stdout, as the desktop user or, for commands that use sudo, as
// root-in-session with the osworld image's sudo shim first on PATH.

import type { ChildProcess } from 'node:child_process';
import { ROOT_CAPS } from '../host/oci-spec.ts';
import type { Session, SessionManager } from '../session/manager.ts';

export const SUDO_SHIM_DIR = '/usr/lib/drums/osworld/bin';
export const HOME = '/home/user';

export interface GuestRun {
  argv: string[];
  root?: boolean;
  stdin?: Buffer | string;
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

export function guestEnv(mgr: SessionManager, root: boolean): Record<string, string> {
  const env = mgr.sessionEnv();
  if (!root) return env;
  return { ...env, PATH: `${SUDO_SHIM_DIR}:${env.PATH}`, USER: 'root', LOGNAME: 'root', HOME };
}

/** Spawns argv in the session (no timeout wrapper): the caller owns the process. */
export function spawnGuest(mgr: SessionManager, s: Session, argv: string[], opts: { root?: boolean; cwd?: string } = {}): ChildProcess {
  const root = opts.root === true;
  return mgr.runtime.spawnExec(s.names.container, {
    uid: root ? 0 : 1000, gid: root ? 0 : 1000, cwd: opts.cwd ?? HOME,
    env: guestEnv(mgr, root), caps: root ? ROOT_CAPS : [], args: argv,
  });
}

/** Runs argv in the session with a timeout enforced inside (coreutils timeout) and outside. */
export function runGuest(mgr: SessionManager, s: Session, req: GuestRun): Promise<GuestResult> {
  const secs = Math.max(0.001, req.timeoutMs / 1000).toFixed(3);
  // Two pipes merged on the host lose the order between them: redirect inside instead.
  const argv = req.mergeStderr ? ['/bin/sh', '-c', 'exec "$@" 2>&1', 'sh', ...req.argv] : req.argv;
  const child = spawnGuest(mgr, s, ['/usr/bin/timeout', '--kill-after=2', '--signal=TERM', secs, ...argv], { root: req.root, cwd: req.cwd });
  const cap = req.maxOutputBytes ?? 256 * 1024 * 1024;
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    const collect = (into: Buffer[]) => (d: Buffer) => {
      if (size >= cap) return;
      const take = d.subarray(0, cap - size);
      size += take.length;
      into.push(take);
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(req.mergeStderr ? out : err));
    let outerTimedOut = false;
    const outer = setTimeout(() => { outerTimedOut = true; child.kill('SIGKILL'); }, req.timeoutMs + 5000);
    const onAbort = () => child.kill('SIGKILL');
    req.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (e) => { clearTimeout(outer); req.signal?.removeEventListener('abort', onAbort); reject(e); });
    child.on('close', (code, sig) => {
      clearTimeout(outer);
      req.signal?.removeEventListener('abort', onAbort);
      const exit = code ?? (sig ? 137 : 1);
      resolve({
        code: exit,
        stdout: Buffer.concat(out),
        stderr: Buffer.concat(err).toString('utf8'),
        timedOut: outerTimedOut || exit === 124 || (exit === 137 && performance.now() - t0 >= req.timeoutMs),
      });
    });
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.stdin ?? '');
  });
}
