/**
 * Window queries over EWMH: client list, titles, classes, pids, geometry, the active window,
 * activate/close requests to the window manager, and an event-driven waitForWindow.
 */
import type { XEvent } from 'x11';
import { DisplayError } from './errors.ts';
import type { XDisplay } from './x-display.ts';

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
  /** Default: the display's request timeout × 2 (10 s by default). */
  timeoutMs?: number;
}

const ATOM_WINDOW = 33,
  ATOM_CARDINAL = 6,
  ATOM_STRING = 31,
  ANY = 0;
const SUBSTRUCTURE_MASK = 0x00080000 | 0x00100000; // SubstructureNotify | SubstructureRedirect
const PROPERTY_CHANGE = 0x00400000;
const STRUCTURE_NOTIFY = 0x00020000;

async function getProp(d: XDisplay, wid: number, name: string, type: number, longLength = 4096): Promise<Buffer | null> {
  const atom = await d._atom(name);
  const rep = await d.request<{ type: number; format: number; data: Buffer }>(`GetProperty(${name})`, (cb) =>
    d._x.GetProperty(0, wid, atom, type, 0, longLength, cb),
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
export async function clientList(d: XDisplay): Promise<number[]> {
  return u32list(await getProp(d, d.root, '_NET_CLIENT_LIST', ATOM_WINDOW));
}

/** Details of one window; null if it vanished while we asked. */
export async function windowInfo(d: XDisplay, id: number): Promise<WindowInfo | null> {
  try {
    const utf8 = await d._atom('UTF8_STRING');
    const [netName, wmName, wmClass, pid, geom, pos, attrs] = await Promise.all([
      getProp(d, id, '_NET_WM_NAME', utf8),
      getProp(d, id, 'WM_NAME', ANY),
      getProp(d, id, 'WM_CLASS', ATOM_STRING),
      getProp(d, id, '_NET_WM_PID', ATOM_CARDINAL),
      d.request<{ width: number; height: number }>('GetGeometry', (cb) => d._x.GetGeometry(id, cb)),
      d.request<{ destX: number; destY: number }>('TranslateCoordinates', (cb) => d._x.TranslateCoordinates(id, d.root, 0, 0, cb)),
      d.request<{ mapState: number }>('GetWindowAttributes', (cb) => d._x.GetWindowAttributes(id, cb)),
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

export async function listWindows(d: XDisplay): Promise<WindowInfo[]> {
  const ids = await clientList(d);
  const infos = await Promise.all(ids.map((id) => windowInfo(d, id)));
  return infos.filter((w): w is WindowInfo => w !== null);
}

export async function activeWindow(d: XDisplay): Promise<WindowInfo | null> {
  const id = u32list(await getProp(d, d.root, '_NET_ACTIVE_WINDOW', ATOM_WINDOW))[0];
  if (!id) return null;
  return windowInfo(d, id);
}

async function hasWindowManager(d: XDisplay): Promise<boolean> {
  return u32list(await getProp(d, d.root, '_NET_SUPPORTING_WM_CHECK', ATOM_WINDOW)).length > 0;
}

/** Ask the window manager to activate (raise + focus) a window; without a WM, set focus directly. */
export async function activateWindow(d: XDisplay, id: number): Promise<void> {
  if (await hasWindowManager(d)) {
    const atom = await d._atom('_NET_ACTIVE_WINDOW');
    // data: source indication 2 (pager: obey it), timestamp CurrentTime, requestor's active window 0
    await d.request<void>('SendEvent(_NET_ACTIVE_WINDOW)', (cb) => d._x.SendClientMessage(d.root, id, atom, 32, [2, 0, 0], SUBSTRUCTURE_MASK, cb));
  } else {
    await d.request<void>('SetInputFocus', (cb) => d._x.SetInputFocus(id, 1, cb));
  }
  await d.sync();
}

/** Ask the window manager to close a window (_NET_CLOSE_WINDOW: the WM sends WM_DELETE_WINDOW). */
export async function closeWindow(d: XDisplay, id: number): Promise<void> {
  const atom = await d._atom('_NET_CLOSE_WINDOW');
  await d.request<void>('SendEvent(_NET_CLOSE_WINDOW)', (cb) => d._x.SendClientMessage(d.root, id, atom, 32, [0, 2], SUBSTRUCTURE_MASK, cb));
  await d.sync();
}

export async function cursorPosition(d: XDisplay): Promise<{ x: number; y: number }> {
  const p = await d.request<{ rootX: number; rootY: number }>('QueryPointer', (cb) => d._x.QueryPointer(d.root, cb));
  return { x: p.rootX, y: p.rootY };
}

const WATCHED = ['_NET_CLIENT_LIST', '_NET_ACTIVE_WINDOW', '_NET_WM_NAME', 'WM_NAME', 'WM_CLASS'];

/**
 * Resolve with the first managed window matching `predicate`. Re-checks only when an event says
 * something changed: PropertyNotify for the client list / active window (root) or a client's
 * name/class, and Map/Unmap/ConfigureNotify of a client. No polling.
 */
export function waitForWindow(d: XDisplay, predicate: (w: WindowInfo) => boolean, options: WaitForWindowOptions = {}): Promise<WindowInfo> {
  const timeoutMs = options.timeoutMs ?? d.timeoutMs * 2;
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
      d.removeListener('xevent', onEvent);
      d.removeListener('closed', onClosed);
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
          const ids = await clientList(d);
          // A window that left the list may come back under the same id: select on it again.
          for (const id of selected) if (!ids.includes(id)) selected.delete(id);
          for (const id of ids) {
            if (!selected.has(id)) {
              selected.add(id);
              // Hear about title/class, map and geometry changes of this client too (this sets our
              // own client's event mask on it; other clients are unaffected).
              if (!d.closed) d._x.ChangeWindowAttributes(id, { eventMask: PROPERTY_CHANGE | STRUCTURE_NOTIFY });
            }
          }
          const infos = await Promise.all(ids.map((id) => windowInfo(d, id)));
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
    const onClosed = () => finish(new DisplayError('display_closed', `X display ${d.socketPath} closed while waiting for a window`));
    const timer = setTimeout(() => finish(new DisplayError('wait_timeout', `no matching window within ${timeoutMs} ms`, { timeoutMs })), timeoutMs);

    if (d.closed) {
      onClosed();
      return;
    }
    d.on('xevent', onEvent);
    d.on('closed', onClosed);
    Promise.all(WATCHED.map((n) => d._atom(n)))
      .then((atoms) => {
        atoms.forEach((a) => watchedAtoms.add(a));
        return check();
      })
      .catch((err) => finish(err as Error));
  });
}
