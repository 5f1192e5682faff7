/**
 * The desktop user every session runs as (and root-in-session, its one
 * alternative): uid, gid, home and the environment every session process
 * sees. The one place these are written; the image's recipes create the same
 * user (uid 1000, /home/user) and OSWorld's tasks hard-code the same paths.
 */

export const DESKTOP_USER = 'user';
export const DESKTOP_UID = 1000;
export const DESKTOP_GID = 1000;
export const DESKTOP_HOME = '/home/user';
export const ROOT_HOME = '/root';

/** The session's Xauthority file (its X cookie, written by the daemon each generation: src/session/x-auth.ts). */
export const XAUTHORITY = '/run/drums/Xauthority';

/** The environment every process in a session sees (init and exec alike). */
export const DESKTOP_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: DESKTOP_HOME,
  USER: DESKTOP_USER,
  LOGNAME: DESKTOP_USER,
  SHELL: '/bin/bash',
  LANG: 'C.UTF-8',
  DISPLAY: ':0',
  XAUTHORITY,
  XDG_RUNTIME_DIR: '/run/drums/xdg',
  DBUS_SESSION_BUS_ADDRESS: 'unix:path=/run/drums/bus',
  NO_AT_BRIDGE: '0',
  // Chromium exposes its AT-SPI tree only when this is set (a flag alone is not enough).
  ACCESSIBILITY_ENABLED: '1',
  // Gecko (Thunderbird) builds its AT-SPI tree only when this is set or GNOME's toolkit-accessibility key is on.
  GNOME_ACCESSIBILITY: '1',
});

/** What root-in-session changes in that environment. */
export const ROOT_ENV: Readonly<Record<string, string>> = Object.freeze({ HOME: ROOT_HOME, USER: 'root', LOGNAME: 'root' });

/** The uid, gid and default working directory of a command run as the desktop user or as root-in-session. */
export function identity(root: boolean): { uid: number; gid: number; home: string } {
  return root ? { uid: 0, gid: 0, home: ROOT_HOME } : { uid: DESKTOP_UID, gid: DESKTOP_GID, home: DESKTOP_HOME };
}
