// Guest preparation, once per session generation (cached here until forgetSession).

import { randomUUID } from 'node:crypto';
import { log } from '../common/log.ts';
import { DESKTOP_GID, DESKTOP_UID } from '../session/desktop-user.ts';
import type { Session } from '../session/manager.ts';
import { HOME, runGuest } from './guest-exec.ts';
import type { GuestContext } from './guest.ts';

const prepared = new Map<string, number>();
const RUN_USER = `/run/user/${DESKTOP_UID}`;
const OWNER = `${DESKTOP_UID}:${DESKTOP_GID}`;
/** Once per generation: /run/user/1000/bus (what OSWorld tasks hard-code) points at the session bus. */
export async function prepare(ctx: GuestContext, s: Session): Promise<void> {
  if (prepared.get(s.id) === s.generation) return;
  const r = await runGuest(ctx.mgr, s, {
    argv: [
      '/bin/sh',
      '-c',
      `mkdir -p ${RUN_USER} && ln -sfn /run/drums/bus ${RUN_USER}/bus && chown -h ${OWNER} ${RUN_USER} ${RUN_USER}/bus && chmod 700 ${RUN_USER}` +
        // python-xlib (pyautogui) insists on an ~/.Xauthority file, even an empty one.
        ` && { [ -e ${HOME}/.Xauthority ] || install -o ${DESKTOP_UID} -g ${DESKTOP_GID} -m 600 /dev/null ${HOME}/.Xauthority; }`,
    ],
    root: true,
    timeoutMs: 10_000,
  });
  if (r.code !== 0) log('warn', 'osworld prepare failed', { id: s.id, stderr: r.stderr });
  // A real entry, or python-xlib prints 'no xauthority details' warnings into every pyautogui command's stdout.
  const x = await runGuest(ctx.mgr, s, {
    argv: ['xauth', '-q', '-f', `${HOME}/.Xauthority`, 'add', ':0', 'MIT-MAGIC-COOKIE-1', randomUUID().replace(/-/g, '')],
    timeoutMs: 10_000,
  });
  if (x.code !== 0) log('warn', 'osworld xauth failed', { id: s.id, stderr: x.stderr });
  prepared.set(s.id, s.generation);
}

export function forgetSession(id: string): void {
  prepared.delete(id);
}
