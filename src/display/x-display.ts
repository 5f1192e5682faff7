/**
 * The display facade the daemon uses: one XConnection to one session's X server, with the
 * keyboard state, pointer, screenshot and window helpers composed over it. Every helper depends
 * on XConnection only (x-connection.ts), never on this class.
 */
import { EventEmitter } from 'node:events';
import * as input from './input.ts';
import { type ClickOptions, type DragOptions, Keyboard, type MouseButton, type ScrollOptions } from './input.ts';
import { captureScreenshot } from './frames.ts';
import type { ScreenshotOptions, ScreenshotResult } from './screenshot.ts';
import * as windows from './windows.ts';
import type { WaitForWindowOptions, WindowInfo } from './windows.ts';
import { FAKE, XConnection, type XConnectionOpenOptions } from './x-connection.ts';

export { DEFAULT_TIMEOUT_MS } from './x-connection.ts';
export type XDisplayOpenOptions = XConnectionOpenOptions;

/** Emits `closed` (reason) once, when the connection goes away for any reason. */
export class XDisplay extends EventEmitter {
  /** The X connection: raw requests, atoms, locks and extension handles. */
  readonly conn: XConnection;
  /** The connection's keymap and held-key state. */
  readonly keyboard: Keyboard;

  private constructor(conn: XConnection, keyboard: Keyboard) {
    super();
    this.conn = conn;
    this.keyboard = keyboard;
    conn.once('closed', (reason: string) => this.emit('closed', reason));
  }

  /**
   * Connect to the X server listening on `socketPath` (a unix path socket, e.g.
   * `/var/lib/drums/sessions/<id>/run/x11/X0`) and load its keymap, within one deadline.
   * Rejects with `connect_failed` or `display_timeout`.
   */
  static async open(socketPath: string, options: XDisplayOpenOptions = {}): Promise<XDisplay> {
    let keyboard: Keyboard | undefined;
    const conn = await XConnection.open(socketPath, {
      ...options,
      init: async (c) => {
        keyboard = new Keyboard(c);
        await keyboard.load();
      },
    });
    return new XDisplay(conn, keyboard!);
  }

  get socketPath(): string {
    return this.conn.socketPath;
  }
  get timeoutMs(): number {
    return this.conn.timeoutMs;
  }
  get root(): number {
    return this.conn.root;
  }
  get width(): number {
    return this.conn.width;
  }
  get height(): number {
    return this.conn.height;
  }
  get depth(): number {
    return this.conn.depth;
  }
  /** Whether screenshots use MIT-SHM (else core GetImage). */
  get shmEnabled(): boolean {
    return this.conn.shm !== null;
  }
  get hasCursorImage(): boolean {
    return !!this.conn.fixes;
  }
  get closed(): boolean {
    return this.conn.closed;
  }

  /** Close the connection. Pending calls reject with `display_closed`. Idempotent. */
  async close(): Promise<void> {
    if (this.conn.closed) return;
    // Put back keycodes still bound for typing (bounded: a wedged server must not block close).
    if (this.keyboard.boundCount > 0) {
      await Promise.race([this.restoreKeymap().catch(() => {}), new Promise((r) => setTimeout(r, 1_000).unref())]);
    }
    this.conn.close();
  }

  // ---- screenshots ----
  screenshot(options: ScreenshotOptions = {}): Promise<ScreenshotResult> {
    return captureScreenshot(this.conn, options);
  }

  // ---- input (each call ends with a round trip) ----
  move(x: number, y: number): Promise<void> {
    return input.move(this.conn, x, y);
  }
  click(opts: ClickOptions = {}): Promise<void> {
    return input.click(this.conn, this.keyboard, opts);
  }
  mouseDown(button: MouseButton = 'left', at?: { x: number; y: number }): Promise<void> {
    return input.mouseButton(this.conn, button, true, at);
  }
  mouseUp(button: MouseButton = 'left', at?: { x: number; y: number }): Promise<void> {
    return input.mouseButton(this.conn, button, false, at);
  }
  drag(path: Array<{ x: number; y: number }>, opts: DragOptions = {}): Promise<void> {
    return input.drag(this.conn, path, opts);
  }
  scroll(opts: ScrollOptions): Promise<void> {
    return input.scroll(this.conn, this.keyboard, opts);
  }
  /** Press and release a chord: `'ctrl+shift+t'`, `['ctrl','c']`, `'Return'`. */
  key(keys: string | string[]): Promise<void> {
    return input.keyChord(this.keyboard, keys);
  }
  keyDown(key: string): Promise<void> {
    return input.keyToggle(this.keyboard, key, true);
  }
  keyUp(key: string): Promise<void> {
    return input.keyToggle(this.keyboard, key, false);
  }
  type(text: string): Promise<void> {
    return input.typeText(this.keyboard, text);
  }
  wait(ms: number): Promise<void> {
    return input.wait(ms);
  }
  /**
   * Reset keycodes temporarily bound for typing to NoSymbol now (otherwise this happens after
   * 5 s of input idle time, see input.ts RESTORE_IDLE_MS).
   */
  restoreKeymap(): Promise<void> {
    return this.conn.inputLock.run(() => this.keyboard.restoreNow());
  }

  /**
   * Releases every mouse button and key the X server has down, whoever pressed them (XTEST from
   * this connection, or another client such as x11vnc): a take-over released mid-drag must not
   * leave the button pressed. Buttons 1..5 and keys from the server's own state (QueryPointer's
   * mask, QueryKeymap); the back/forward buttons (8, 9), which the core mask does not show, are
   * released anyway (the server ignores the release of a button that is up).
   */
  releaseAll(): Promise<{ buttons: number[]; keycodes: number[] }> {
    const c = this.conn;
    return c.inputLock.run(async () => {
      const p = await c.request<{ keyMask: number }>('QueryPointer', (cb) => c.x.QueryPointer(c.root, cb));
      const keys = await c.request<Buffer>('QueryKeymap', (cb) => (c.x as any).QueryKeymap(cb));
      const buttons: number[] = [];
      for (let b = 1; b <= 5; b++) if (p.keyMask & (1 << (7 + b))) buttons.push(b);
      const keycodes: number[] = [];
      for (let i = 0; i < 32; i++) for (let bit = 0; bit < 8; bit++) if (keys[i]! & (1 << bit)) keycodes.push(i * 8 + bit);
      for (const b of buttons) c.fakeInput(FAKE.buttonRelease, b);
      for (const b of [8, 9]) c.fakeInput(FAKE.buttonRelease, b);
      for (const k of keycodes) c.fakeInput(FAKE.keyRelease, k);
      this.keyboard.forgetHeld();
      await c.sync();
      return { buttons, keycodes };
    });
  }

  // ---- windows ----
  listWindows(): Promise<WindowInfo[]> {
    return windows.listWindows(this.conn);
  }
  activeWindow(): Promise<WindowInfo | null> {
    return windows.activeWindow(this.conn);
  }
  activateWindow(id: number): Promise<void> {
    return windows.activateWindow(this.conn, id);
  }
  closeWindow(id: number): Promise<void> {
    return windows.closeWindow(this.conn, id);
  }
  cursorPosition(): Promise<{ x: number; y: number }> {
    return windows.cursorPosition(this.conn);
  }
  screenSize(): { width: number; height: number } {
    return { width: this.conn.width, height: this.conn.height };
  }
  waitForWindow(predicate: (w: WindowInfo) => boolean, options?: WaitForWindowOptions): Promise<WindowInfo> {
    return windows.waitForWindow(this.conn, predicate, options);
  }
}
