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
 */
import { spawn } from 'node:child_process';
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
