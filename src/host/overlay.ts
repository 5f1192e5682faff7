import { readFileSync } from 'node:fs';
import { run } from '../common/exec.ts';

/**
 * The session root: the image read-only below, a per-session upper directory
 * on disk above. The mount lives in the host mount namespace (the runtime
 * pivots into it), so it is recorded in the session record and swept.
 */
export async function mountOverlay(source: string, lower: string, upper: string, work: string, target: string): Promise<void> {
  await run(['mount', '-t', 'overlay', source, '-o', `lowerdir=${lower},upperdir=${upper},workdir=${work}`, target]);
}

/**
 * Like mountOverlay, but with the layer paths relative to `cwd`: the kernel
 * shows overlay options as given in /proc/self/mountinfo, which a session can
 * read, and host paths must not leak into a session.
 */
export async function mountOverlayRelative(source: string, cwd: string, lower: string, upper: string, work: string, target: string): Promise<void> {
  await run(['mount', '-t', 'overlay', source, '-o', `lowerdir=${lower},upperdir=${upper},workdir=${work}`, target], { cwd });
}

/** A small tmpfs for an instance's sockets and status files (its paths, not the host's, show in a session's mountinfo). */
export async function mountRuntimeTmpfs(source: string, target: string): Promise<void> {
  if (mountsUnder(target).includes(target)) return;
  await run(['mount', '-t', 'tmpfs', '-o', 'mode=0711,size=256m,nosuid,nodev', source, target]);
}

/**
 * A session's own small tmpfs (its bound /run/drums and /tmp/.X11-unix), so no session can fill a shared one.
 * Its root is root's and closed (0700): the session's layout (src/session/layout.ts) opens it to the session's
 * own root alone, never to other host users, who would otherwise reach the 1777 X socket directory in it.
 */
export async function mountSessionTmpfs(source: string, target: string, bytes: number): Promise<void> {
  await run(['mount', '-t', 'tmpfs', '-o', `mode=0700,uid=0,gid=0,size=${bytes},nr_inodes=4096,nosuid,nodev,noexec`, source, target]);
}

/** Mount points (from /proc/self/mountinfo) at or below `prefix`, deepest first. */
export function mountsUnder(prefix: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const mp = line.split(' ')[4];
    if (!mp) continue;
    const path = mp.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : prefix + '/')) out.push(path);
  }
  return out.sort((a, b) => b.length - a.length);
}

export async function unmountOverlay(target: string): Promise<void> {
  for (const mp of mountsUnder(target)) {
    const r = await run(['umount', mp], { okCodes: [0, 32] });
    if (r.code !== 0) await run(['umount', '-l', mp], { okCodes: [0, 32] });
  }
}
