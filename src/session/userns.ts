import { chownSync, existsSync, lstatSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/exec.ts';
import { createUserns, mountIdmapped, unpin, type UidRange } from '../host/userns.ts';
import { mountsUnder } from '../host/overlay.ts';
import { DESKTOP_GID, DESKTOP_UID } from './desktop-user.ts';

/**
 * The session side of a user namespace per session (src/host/userns.ts): where
 * its pins live, how the image is seen, and which host ids the daemon gives
 * the files it makes for the session. A session without one has "base 0":
 * its ids are the host's.
 */
export interface UsernsPaths {
  /** Bind mount pinning the session's user namespace (runc joins it by this path). */
  pin: string;
  /** The image: a symlink to it (no user namespace) or its idmapped mount. */
  lower: string;
}

export const usernsPaths = (sessionDir: string): UsernsPaths => ({ pin: join(sessionDir, 'userns'), lower: join(sessionDir, 'lower') });

/** The host uid/gid of in-session id `id` (`uids` undefined: the host's own). */
export const hostId = (uids: UidRange | undefined, id: number): number => (uids ? uids.base + id : id);

/** The host ids of root-in-session and of the desktop user. */
export function hostIds(uids: UidRange | undefined) {
  return { rootUid: hostId(uids, 0), rootGid: hostId(uids, 0), desktopUid: hostId(uids, DESKTOP_UID), desktopGid: hostId(uids, DESKTOP_GID) };
}

/** Makes the user namespace and the network namespace it owns (the create's `userns` step). */
export async function makeSessionUserns(uids: UidRange, sessionDir: string, netns: string): Promise<void> {
  mkdirSync(sessionDir, { recursive: true, mode: 0o700 });
  await createUserns(uids, usernsPaths(sessionDir).pin, netns);
}

/** Undoes makeSessionUserns: the netns pin (with `ip netns del`), then the user namespace pin. */
export async function removeSessionUserns(sessionDir: string, netns: string): Promise<void> {
  await run(['ip', 'netns', 'del', netns], { okCodes: [0, 1] });
  const p = usernsPaths(sessionDir);
  await unpin(p.lower);
  await unpin(p.pin, { removeFile: true });
}

/**
 * The lower layer at `<session>/lower`: a symlink to the image, or (with a user
 * namespace) the image's idmapped read-only mount, made once per session and
 * kept across resets.
 */
export async function prepareLower(uids: UidRange | undefined, sessionDir: string, imageDir: string): Promise<void> {
  const { lower, pin } = usernsPaths(sessionDir);
  if (!uids) {
    rmSync(lower, { force: true });
    symlinkSync(imageDir, lower);
    return;
  }
  if (mountsUnder(lower).includes(lower)) return;
  if (existsSync(lower) && lstatSync(lower).isSymbolicLink()) rmSync(lower);
  mkdirSync(lower, { recursive: true, mode: 0o755 });
  await mountIdmapped(pin, imageDir, lower);
}

/** Gives the session's root the directories the daemon made in its writable layer and binds (no-op without a user namespace). */
export function chownToSessionRoot(uids: UidRange | undefined, paths: string[]): void {
  if (!uids) return;
  for (const p of paths) chownSync(p, uids.base, uids.base);
}
