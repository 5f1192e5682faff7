/**
 * Each generation's X cookie (issue 27, finding 3). The daemon makes a MIT-MAGIC-COOKIE-1 for every
 * generation of a session (create, reset), keeps it in the session record (its own state, never read
 * back from the session), and writes it as the session's Xauthority file before the container starts:
 * Xvfb reads it with `-auth` (guest/session-init), the session's clients find it through XAUTHORITY
 * (DESKTOP_ENV), and the daemon's own X connection sends it from the record.
 *
 * A memory fork's copies restore the source's X server, cookie and all (it lives in the server's
 * memory): they keep the source's cookie (RestoreSeed.xCookie) until their first reset. That shares
 * nothing new: each copy reaches only its own X socket.
 */
import { closeSync, constants, fchmodSync, fchownSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { newXCookie, xauthorityFile } from '../display/xauth.ts';
import { XAUTHORITY } from './desktop-user.ts';
import { identityOf, type Session } from './session.ts';
import { hostIds } from './userns.ts';

/** The file's name in the session's run directory (/run/drums in the session). */
export const XAUTHORITY_NAME = XAUTHORITY.slice(XAUTHORITY.lastIndexOf('/') + 1);

/** This generation's cookie: a new one, or the checkpoint's for a memory fork's first generation. */
export function armXCookie(s: Session): void {
  s.xCookie = s._restore?.xCookie ?? newXCookie();
}

/**
 * Writes the generation's Xauthority file into the session's run directory, 0600 and the desktop user's.
 * Runs before the container starts (no process of the session is there to race), and never through a
 * link: what a memory fork's seed copied there from its source is removed first, and the file is created
 * with O_EXCL | O_NOFOLLOW and given its owner through the descriptor.
 */
export function writeXauthority(s: Session): void {
  if (!s.xCookie) throw new Error(`session ${s.id} has no X cookie for this generation`);
  const path = join(s.runDir, XAUTHORITY_NAME);
  rmSync(path, { recursive: true, force: true });
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    // FamilyLocal entries name the session's host name: its id (the OCI hostname; a copy's is set anew).
    writeSync(fd, xauthorityFile(s.xCookie, identityOf(s)));
    const ids = hostIds(s.uids);
    fchownSync(fd, ids.desktopUid, ids.desktopGid);
    fchmodSync(fd, 0o600);
  } finally {
    closeSync(fd);
  }
}
