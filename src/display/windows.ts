/**
 * Window queries over EWMH: client list, titles, classes, pids, geometry, the active window,
 * activate/close requests to the window manager, and an event-driven waitForWindow.
 */
import type { XEvent } from 'x11';
import { DisplayError } from './errors.ts';
import type { XConnection } from './x-connection.ts';

export interface WindowInfo {
  id: number;
  title: string;
  /** WM_CLASS instance and class names. */
  instance: string;
  className: string;
  pid: number | null;
  /** Viewable (mapped, and all its ancestors mapped). */
  mapped: boolean;
  /** Client area in root (screen) coordinates. */
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface WaitForWindowOptions {
  /** Default: the connection's request timeout × 2 (10 s by default). */
  timeoutMs?: number;
}

const ATOM_WINDOW = 33,
  ATOM_CARDINAL = 6,
  ATOM_STRING = 31,
  ANY = 0;
const SUBSTRUCTURE_MASK = 0x00080000 | 0x00100000; // SubstructureNotify | SubstructureRedirect
const PROPERTY_CHANGE = 0x00400000;
const STRUCTURE_NOTIFY = 0x00020000;

async function getProp(c: XConnection, wid: number, name: string, type: number, longLength = 4096): Promise<Buffer | null> {
  const atom = await c.atom(name);
  const rep = await c.request<{ type: number; format: number; data: Buffer }>(`GetProperty(${name})`, (cb) =>
    c.x.GetProperty(0, wid, atom, type, 0, longLength, cb),
  );
  if (!rep || rep.type === 0) return null;
  return rep.data;
}

function u32list(buf: Buffer | null): number[] {
  if (!buf) return [];
  const out: number[] = [];
  for (let o = 0; o + 4 <= buf.length; o += 4) out.push(buf.readUInt32LE(o));
  return out;
}

/** Ids from _NET_CLIENT_LIST (managed top-level windows, in mapping order). */
export async function clientList(c: XConnection): Promise<number[]> {
  return u32list(await getProp(c, c.root, '_NET_CLIENT_LIST', ATOM_WINDOW));
}

/** Details of one window; null if it vanished while we asked. */
export async function windowInfo(c: XConnection, id: number): Promise<WindowInfo | null> {
  try {
    const utf8 = await c.atom('UTF8_STRING');
    const [netName, wmName, wmClass, pid, geom, pos, attrs] = await Promise.all([
      getProp(c, id, '_NET_WM_NAME', utf8),
      getProp(c, id, 'WM_NAME', ANY),
      getProp(c, id, 'WM_CLASS', ATOM_STRING),
      getProp(c, id, '_NET_WM_PID', ATOM_CARDINAL),
      c.request<{ width: number; height: number }>('GetGeometry', (cb) => c.x.GetGeometry(id, cb)),
      c.request<{ destX: number; destY: number }>('TranslateCoordinates', (cb) => c.x.TranslateCoordinates(id, c.root, 0, 0, cb)),
      c.request<{ mapState: number }>('GetWindowAttributes', (cb) => c.x.GetWindowAttributes(id, cb)),
    ]);
    const title = netName?.length ? netName.toString('utf8') : wmName ? wmName.toString('latin1') : '';
    const cls = wmClass ? wmClass.toString('latin1').split('\0') : [];
    return {
      id,
      title,
      instance: cls[0] ?? '',
      className: cls[1] ?? '',
      pid: pid && pid.length >= 4 ? pid.readUInt32LE(0) : null,
      mapped: attrs.mapState === 2,
      x: pos.destX,
      y: pos.destY,
      width: geom.width,
      height: geom.height,
    };
  } catch (err) {
    if (err instanceof DisplayError && err.code === 'x_error') return null; // BadWindow: it went away
    throw err;
  }
}

export async function listWindows(c: XConnection): Promise<WindowInfo[]> {
  const ids = await clientList(c);
  const infos = await Promise.all(ids.map((id) => windowInfo(c, id)));
  return infos.filter((w): w is WindowInfo => w !== null);
}

export async function activeWindow(c: XConnection): Promise<WindowInfo | null> {
  const id = u32list(await getProp(c, c.root, '_NET_ACTIVE_WINDOW', ATOM_WINDOW))[0];
  if (!id) return null;
  return windowInfo(c, id);
}

async function hasWindowManager(c: XConnection): Promise<boolean> {
  return u32list(await getProp(c, c.root, '_NET_SUPPORTING_WM_CHECK', ATOM_WINDOW)).length > 0;
}

/** Ask the window manager to activate (raise + focus) a window; without a WM, set focus directly. */
export async function activateWindow(c: XConnection, id: number): Promise<void> {
  if (await hasWindowManager(c)) {
    const atom = await c.atom('_NET_ACTIVE_WINDOW');
    // data: source indication 2 (pager: obey it), timestamp CurrentTime, requestor's active window 0
    await c.request<void>('SendEvent(_NET_ACTIVE_WINDOW)', (cb) => c.x.SendClientMessage(c.root, id, atom, 32, [2, 0, 0], SUBSTRUCTURE_MASK, cb));
  } else {
    await c.request<void>('SetInputFocus', (cb) => c.x.SetInputFocus(id, 1, cb));
  }
  await c.sync();
}

/** Ask the window manager to close a window (_NET_CLOSE_WINDOW: the WM sends WM_DELETE_WINDOW). */
export async function closeWindow(c: XConnection, id: number): Promise<void> {
  const atom = await c.atom('_NET_CLOSE_WINDOW');
  await c.request<void>('SendEvent(_NET_CLOSE_WINDOW)', (cb) => c.x.SendClientMessage(c.root, id, atom, 32, [0, 2], SUBSTRUCTURE_MASK, cb));
  await c.sync();
}

export async function cursorPosition(c: XConnection): Promise<{ x: number; y: number }> {
  const p = await c.request<{ rootX: number; rootY: number }>('QueryPointer', (cb) => c.x.QueryPointer(c.root, cb));
  return { x: p.rootX, y: p.rootY };
}

const WATCHED = ['_NET_CLIENT_LIST', '_NET_ACTIVE_WINDOW', '_NET_WM_NAME', 'WM_NAME', 'WM_CLASS'];

/**
 * Resolve with the first managed window matching `predicate`. Re-checks only when an event says
 * something changed: PropertyNotify for the client list / active window (root) or a client's
 * name/class, and Map/Unmap/ConfigureNotify of a client. No polling.
 */
export function waitForWindow(c: XConnection, predicate: (w: WindowInfo) => boolean, options: WaitForWindowOptions = {}): Promise<WindowInfo> {
  const timeoutMs = options.timeoutMs ?? c.timeoutMs * 2;
  return new Promise<WindowInfo>((resolve, reject) => {
    let done = false;
    let running = false;
    let dirty = false;
    const watchedAtoms = new Set<number>();
    const selected = new Set<number>();

    const finish = (err: Error | null, w?: WindowInfo) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      c.removeListener('xevent', onEvent);
      c.removeListener('closed', onClosed);
      if (err) reject(err);
      else resolve(w!);
    };

    const check = async () => {
      if (done) return;
      if (running) {
        dirty = true;
        return;
      }
      running = true;
      try {
        do {
          dirty = false;
          const ids = await clientList(c);
          // A window that left the list may come back under the same id: select on it again.
          for (const id of selected) if (!ids.includes(id)) selected.delete(id);
          for (const id of ids) {
            if (!selected.has(id)) {
              selected.add(id);
              // Hear about title/class, map and geometry changes of this client too (this sets our
              // own client's event mask on it; other clients are unaffected).
              if (!c.closed) c.x.ChangeWindowAttributes(id, { eventMask: PROPERTY_CHANGE | STRUCTURE_NOTIFY });
            }
          }
          const infos = await Promise.all(ids.map((id) => windowInfo(c, id)));
          for (const w of infos) {
            if (w && predicate(w)) {
              finish(null, w);
              return;
            }
          }
        } while (dirty && !done);
      } catch (err) {
        finish(err as Error);
      } finally {
        running = false;
      }
    };

    const onEvent = (ev: XEvent) => {
      if (
        ev.name === 'PropertyNotify'
          ? watchedAtoms.has(ev.atom as number)
          : (ev.name === 'ConfigureNotify' || ev.name === 'MapNotify' || ev.name === 'UnmapNotify') && selected.has(ev.wid as number)
      ) {
        void check();
      }
    };
    const onClosed = () => finish(new DisplayError('display_closed', `X display ${c.socketPath} closed while waiting for a window`));
    const timer = setTimeout(() => finish(new DisplayError('wait_timeout', `no matching window within ${timeoutMs} ms`, { timeoutMs })), timeoutMs);

    if (c.closed) {
      onClosed();
      return;
    }
    c.on('xevent', onEvent);
    c.on('closed', onClosed);
    Promise.all(WATCHED.map((n) => c.atom(n)))
      .then((atoms) => {
        atoms.forEach((a) => watchedAtoms.add(a));
        return check();
      })
      .catch((err) => finish(err as Error));
  });
}
