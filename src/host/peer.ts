/**
 * Who serves a unix socket the daemon connected to. The daemon connects to a
 * session's X server and AT-SPI bus through paths in directories the session
 * can write (`/tmp/.X11-unix` is 1777, `/run/drums` is the desktop user's), so
 * a session could swap its socket for a symlink to another session's (or to a
 * host service's) socket. The check runs on the connected socket itself,
 * before the daemon sends a byte: the peer (the process that called listen())
 * must be in the session's own cgroup. The kernel names the peer as a pidfd
 * (SO_PEERPIDFD), so no swap of the path and no pid reuse between connect and
 * check can pass (docs/security.md, "The daemon's connections into a session").
 *
 * pinSocket comes first, so that a planted symlink is not even connected to: it opens the socket file itself,
 * never following a symlink at any component below the daemon's own directory, and the daemon connects through
 * the descriptor (`/proc/self/fd/N`).
 */
import { spawn } from 'node:child_process';
import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import type { Socket } from 'node:net';
import { USERNS_HELPER } from './userns.ts';

/** Resolves if the peer of `sock` (a connected unix socket) is a process of `cgroup` or below; rejects with the reason otherwise. */
export function checkPeer(sock: Socket, cgroup: string, timeoutMs = 5000): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    // The descriptor by number: a stream given as stdio would have its reading stopped by Node, for good.
    const fd = (sock as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) {
      reject(new Error('the socket has no descriptor to check'));
      return;
    }
    const child = spawn(USERNS_HELPER, ['peer', cgroup], { stdio: ['ignore', 'ignore', 'pipe', fd] });
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 2000) stderr += d.toString();
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(stderr.trim().replace(/^drums-userns: peer: /, '') || `the peer check ended with ${code ?? signal}`));
    });
  });
}

/** O_PATH: a descriptor naming a file without opening it (Linux; not in Node's constants). */
const O_PATH = 0o10000000;

/**
 * A descriptor (O_PATH) of the unix socket at `dir/rel`, resolved one component at a time without following
 * any symlink under `dir` (which the caller trusts); throws unless every component below is a directory and the
 * last a socket. Connect through `/proc/self/fd/<fd>` and close it after.
 */
export function pinSocket(dir: string, rel: string): number {
  const parts = rel.split('/').filter(Boolean);
  if (!parts.length || parts.some((p) => p === '..' || p === '.')) throw new Error(`'${rel}' is not a plain relative path`);
  let fd = openSync(dir, O_PATH | constants.O_DIRECTORY);
  try {
    for (const [i, part] of parts.entries()) {
      const last = i === parts.length - 1;
      const next = openSync(`/proc/self/fd/${fd}/${part}`, O_PATH | constants.O_NOFOLLOW);
      closeSync(fd);
      fd = next;
      const st = fstatSync(fd);
      if (last ? !st.isSocket() : !st.isDirectory())
        throw new Error(`${[dir, ...parts.slice(0, i + 1)].join('/')} is ${st.isSymbolicLink() ? 'a symlink' : 'not a socket'}: refused`);
    }
    return fd;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

/** `fn` with a path that names the pinned socket `dir/rel` (pinSocket), the descriptor closed once `fn` settles. */
export async function withPinnedSocket<T>(dir: string, rel: string, fn: (path: string) => Promise<T>): Promise<T> {
  const fd = pinSocket(dir, rel);
  try {
    return await fn(`/proc/self/fd/${fd}`);
  } finally {
    closeSync(fd);
  }
}
