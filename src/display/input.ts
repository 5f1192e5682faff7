/**
 * XTEST input over one XConnection: the keyboard and the pointer. They are one module because
 * they share state: a click or a scroll with modifiers holds keys through the connection's
 * Keyboard (its keymap cache, spare-keycode binding and held keys), and every entry point, key
 * or pointer, holds the connection's input lock (keymap remapping must not interleave with any
 * input) and ends with a round trip, so the server has processed the events before the promise
 * resolves.
 *
 * Keyboard: characters and keys that the current keymap lacks are bound for the duration of the
 * call to a spare keycode (a keycode with no keysyms) with ChangeKeyboardMapping, then reset to
 * NoSymbol (after an idle time, RESTORE_IDLE_MS). Pointer: motion, buttons, drags and the wheel.
 */
import type { XEvent } from 'x11';
import { DisplayError } from './errors.ts';
import { charToKeysyms, isModifierKeysym, keysymFromName, KEYSYM_SHIFT_L, splitChord } from './keysyms.ts';
import { FAKE, type XConnection } from './x-connection.ts';

// ─── Keyboard ───

/** Round trip every this many typed characters, so a long text does not flood the server queue. */
const TYPE_SYNC_EVERY = 64;
/**
 * Minimum time between the last use of a temporarily bound keycode and rebinding or resetting it.
 * Clients fetch the changed map only when they process the notify, possibly long after we sent it.
 */
export const REBIND_QUIET_MS = 200;
/**
 * Reset temporary bindings to NoSymbol after this much input idle time. Every keymap change makes
 * each client re-read the map and the window manager re-grab its keys (openbox: ~50-75 ms CPU per
 * change on this machine), so bindings are kept for reuse across calls until input goes idle.
 */
export const RESTORE_IDLE_MS = 5_000;
/**
 * Time between binding a keysym to a spare keycode and first pressing it. The notify reaches a
 * client before the key event, but a client may re-read the map asynchronously (Chromium does) and
 * translate a key that arrives meanwhile with the old map, where the keycode is NoSymbol: the
 * character is lost (Chromium loads keymaps on a worker thread). Seen in CI and once in 20 tries
 * here: the first character of a typed text with a fresh binding went missing.
 */
export const BIND_SETTLE_MS = 50;

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Key names → keysyms; a name containing `+` (and longer than one char) is split as a chord. */
export function resolveKeyList(keys: string | string[], allowEmpty = false): number[] {
  const names =
    typeof keys === 'string' ? splitChord(keys) : keys.flatMap((k) => (typeof k === 'string' && k.length > 1 && k.includes('+') ? splitChord(k) : [k]));
  if (names.length === 0 && !allowEmpty) throw new DisplayError('invalid_key', 'no key given', { key: keys });
  return names.map((n) => keysymFromName(n));
}

export async function keyChord(kb: Keyboard, keys: string | string[]): Promise<void> {
  const syms = resolveKeyList(keys);
  return kb.conn.inputLock.run(async () => {
    await kb.ensureFresh();
    await kb.withKeysHeld(syms, async () => {});
    kb.scheduleRestore();
    await kb.conn.sync();
  });
}

export async function keyToggle(kb: Keyboard, key: string, down: boolean): Promise<void> {
  const sym = keysymFromName(key);
  return kb.conn.inputLock.run(async () => {
    await kb.ensureFresh();
    if (down) await kb.hold(sym);
    else await kb.release(sym);
    kb.scheduleRestore();
    await kb.conn.sync();
  });
}

export async function typeText(kb: Keyboard, text: string): Promise<void> {
  if (typeof text !== 'string') throw new DisplayError('invalid_action', 'text: must be a string', { field: 'text' });
  // Validate every character before anything is typed.
  const chars: number[][] = [];
  for (const ch of text.replace(/\r\n/g, '\n')) chars.push(charToKeysyms(ch));
  return kb.conn.inputLock.run(async () => {
    await kb.ensureFresh();
    try {
      await kb.prebind(chars);
      let n = 0;
      for (const candidates of chars) {
        await kb.tap(candidates);
        if (++n % TYPE_SYNC_EVERY === 0) await kb.conn.sync();
      }
    } finally {
      kb.scheduleRestore();
    }
    await kb.conn.sync();
  });
}

interface KeyLoc {
  keycode: number;
  level: number;
}

/** Keymap cache, spare-keycode binding and held-key state for one connection. */
export class Keyboard {
  readonly conn: XConnection;
  private perKeycode = 2;
  private lookup = new Map<number, KeyLoc>();
  private spare: number[] = [];
  /** keysym → spare keycode currently bound to it (kept across calls until the idle restore). */
  private bound = new Map<number, number>();
  /** keycode → time (ms) it was last bound or pressed. */
  private lastUse = new Map<number, number>();
  /** keycode → time (ms) it was bound (cleared once it has settled, see BIND_SETTLE_MS). */
  private boundAt = new Map<number, number>();
  /** keysym → { keycode, withShift } for keys held by key_down. */
  private held = new Map<number, { keycode: number; withShift: boolean }>();
  private stale = false;
  private shiftKeycode = 0;
  private restoreTimer: NodeJS.Timeout | null = null;

  constructor(conn: XConnection) {
    this.conn = conn;
    conn.on('xevent', (ev: XEvent) => {
      if (ev.name === 'MappingNotify') this.onMappingNotify(ev);
    });
  }

  /** Number of spare keycodes available for temporary binding. */
  get spareCount(): number {
    return this.spare.length;
  }
  /** Keysyms currently bound to spare keycodes. */
  get boundCount(): number {
    return this.bound.size;
  }

  async load(): Promise<void> {
    const c = this.conn;
    const min = c.info.min_keycode,
      max = c.info.max_keycode;
    const rows = await c.request<number[][]>('GetKeyboardMapping', (cb) => c.x.GetKeyboardMapping(min, max - min + 1, cb));
    this.perKeycode = rows[0]?.length ?? 2;
    const lookup = new Map<number, KeyLoc>();
    const spare: number[] = [];
    const ours = new Set(this.bound.values());
    rows.forEach((row, i) => {
      const kc = min + i;
      if (ours.has(kc) || row.every((s) => s === 0)) {
        spare.push(kc);
        return;
      }
      // Only group 1, levels 1-2 (columns 0 and 1) are reachable with Shift alone.
      for (let level = 0; level < Math.min(2, row.length); level++) {
        const sym = row[level];
        if (sym === 0) continue;
        const prev = lookup.get(sym);
        if (!prev || level < prev.level) lookup.set(sym, { keycode: kc, level });
      }
      // Core protocol rule: a lone alphabetic keysym in column 0 means [lower, upper].
      if (row.length >= 2 && row[1] === 0 && row[0] !== 0) {
        const upper = upperKeysym(row[0]);
        if (upper !== row[0] && !lookup.has(upper)) lookup.set(upper, { keycode: kc, level: 1 });
      }
    });
    this.lookup = lookup;
    // Keycode 8 is the lowest X keycode but XKB keymaps commonly leave it undefined: skip it.
    this.spare = spare.filter((kc) => kc > 8);
    this.shiftKeycode = lookup.get(KEYSYM_SHIFT_L)?.keycode ?? 0;
    this.stale = false;
  }

  onMappingNotify(ev: { request?: number }): void {
    if (ev.request === 0 || ev.request === 1) this.stale = true;
  }

  /** Reload the keymap if someone (including our own restore) changed it. */
  async ensureFresh(): Promise<void> {
    if (this.stale && this.bound.size === 0) await this.load();
  }

  /**
   * Wait until no temporarily bound keycode was used for REBIND_QUIET_MS. Clients translate a
   * keycode with the map they fetch when they process the notify, which can be well after we sent
   * the key: changing the binding earlier would make them see the new keysym (or NoSymbol).
   */
  private async quiet(): Promise<void> {
    let last = 0;
    for (const kc of this.bound.values()) last = Math.max(last, this.lastUse.get(kc) ?? 0);
    await this.conn.sync();
    const wait = last + REBIND_QUIET_MS - performance.now();
    if (wait > 0) await sleep(wait);
  }

  /** Find or bind a keycode for one of the candidate keysyms (best first). */
  private async locate(candidates: number[], pinned: Set<number>): Promise<KeyLoc> {
    for (const sym of candidates) {
      const loc = this.lookup.get(sym);
      if (loc) return loc;
    }
    this.cancelRestore();
    for (const sym of candidates) {
      const kc = this.bound.get(sym);
      if (kc !== undefined) return { keycode: kc, level: 0 };
    }
    const sym = candidates[0];
    const heldCodes = new Set([...this.held.values()].map((h) => h.keycode));
    const busy = () => new Set([...this.bound.values(), ...heldCodes]);
    let used = busy();
    let kc = this.spare.find((k) => !used.has(k));
    if (kc === undefined) {
      // All spare keycodes are bound: let clients catch up once, then free every binding that is
      // not held or part of the current chord (so the next ~19 new characters need no wait).
      await this.quiet();
      for (const [s, k] of this.bound) if (!pinned.has(k) && !heldCodes.has(k)) this.bound.delete(s);
      used = busy();
      kc = this.spare.find((k) => !used.has(k));
    }
    if (kc === undefined) {
      throw new DisplayError('unsupported', `no spare keycode left to bind keysym 0x${sym.toString(16)} (${this.spare.length} spare keycodes)`);
    }
    const row = new Array<number>(this.perKeycode).fill(0);
    row[0] = sym;
    if (row.length > 1) row[1] = sym;
    this.conn.assertOpen('ChangeKeyboardMapping');
    this.conn.x.ChangeKeyboardMapping(kc, this.perKeycode, row);
    this.bound.set(sym, kc);
    this.lastUse.set(kc, performance.now());
    this.boundAt.set(kc, performance.now());
    return { keycode: kc, level: 0 };
  }

  /**
   * Bind, in one go, the keysyms that the keymap lacks for the given characters (as many as there
   * are free spare keycodes), so typing pays the settle time once rather than per character.
   */
  async prebind(chars: number[][]): Promise<void> {
    const need = new Set<number>();
    for (const candidates of chars) {
      if (candidates.some((sym) => this.lookup.has(sym) || this.bound.has(sym))) continue;
      need.add(candidates[0]);
    }
    const used = new Set([...this.bound.values(), ...[...this.held.values()].map((h) => h.keycode)]);
    let free = this.spare.filter((k) => !used.has(k)).length;
    for (const sym of need) {
      if (free-- <= 0) break;
      await this.locate([sym], new Set());
    }
  }

  /** Wait until every freshly bound keycode about to be pressed has settled in the clients. */
  private async settle(keycode: number): Promise<void> {
    const at = this.boundAt.get(keycode);
    if (at === undefined) return;
    if (at + BIND_SETTLE_MS > performance.now()) {
      await this.conn.sync();
      await sleep(Math.max(0, at + BIND_SETTLE_MS - performance.now()));
    }
    // Everything bound up to now has settled too.
    const now = performance.now();
    for (const [kc, t] of this.boundAt) if (t + BIND_SETTLE_MS <= now) this.boundAt.delete(kc);
  }

  private shiftHeld(): boolean {
    for (const h of this.held.values()) if (h.keycode === this.shiftKeycode || h.withShift) return true;
    return false;
  }

  private press(keycode: number, down: boolean): void {
    this.conn.fakeInput(down ? FAKE.keyPress : FAKE.keyRelease, keycode);
    if (this.lastUse.has(keycode)) this.lastUse.set(keycode, performance.now());
  }

  /** Type one character (candidate keysyms best first). */
  async tap(candidates: number[]): Promise<void> {
    const loc = await this.locate(candidates, new Set());
    const shift = loc.level === 1 && !this.shiftHeld() && this.shiftKeycode !== 0;
    await this.settle(loc.keycode);
    if (shift) this.press(this.shiftKeycode, true);
    this.press(loc.keycode, true);
    this.press(loc.keycode, false);
    if (shift) this.press(this.shiftKeycode, false);
  }

  /** Press the keys in order, run fn, release in reverse (a chord when fn is empty). */
  async withKeysHeld(syms: number[], fn: () => Promise<void>): Promise<void> {
    if (syms.length === 0) return fn();
    await this.ensureFresh();
    const pinned = new Set<number>();
    const pressed: number[] = [];
    const hasShift = syms.some((s) => s === KEYSYM_SHIFT_L || s === 0xffe2) || this.shiftHeld();
    let shiftAdded = false;
    try {
      for (const sym of syms) {
        const loc = await this.locate([sym], pinned);
        pinned.add(loc.keycode);
        if (loc.level === 1 && !hasShift && !shiftAdded && !isModifierKeysym(sym) && this.shiftKeycode) {
          this.press(this.shiftKeycode, true);
          pressed.push(this.shiftKeycode);
          shiftAdded = true;
        }
        await this.settle(loc.keycode);
        this.press(loc.keycode, true);
        pressed.push(loc.keycode);
      }
      await fn();
    } finally {
      if (!this.conn.closed) for (const kc of pressed.reverse()) this.press(kc, false);
    }
  }

  async hold(sym: number): Promise<void> {
    if (this.held.has(sym)) return;
    const loc = await this.locate([sym], new Set());
    const withShift = loc.level === 1 && !this.shiftHeld() && !isModifierKeysym(sym) && this.shiftKeycode !== 0;
    await this.settle(loc.keycode);
    if (withShift) this.press(this.shiftKeycode, true);
    this.press(loc.keycode, true);
    this.held.set(sym, { keycode: loc.keycode, withShift });
  }

  /** Forgets every key held by key_down (the caller releases what the server has down). */
  forgetHeld(): void {
    this.held.clear();
  }

  async release(sym: number): Promise<void> {
    const h = this.held.get(sym);
    if (h) {
      this.held.delete(sym);
      this.press(h.keycode, false);
      if (h.withShift) this.press(this.shiftKeycode, false);
      return;
    }
    // Not held by us: release its keycode anyway (harmless if it is up).
    const loc = this.lookup.get(sym) ?? (this.bound.has(sym) ? { keycode: this.bound.get(sym)! } : undefined);
    if (loc) this.press(loc.keycode, false);
  }

  private cancelRestore(): void {
    if (this.restoreTimer) {
      clearTimeout(this.restoreTimer);
      this.restoreTimer = null;
    }
  }

  /**
   * Schedule resetting the temporarily bound keycodes to NoSymbol once input has been idle for
   * RESTORE_IDLE_MS (doing it at the end of each call would race the clients, see quiet()).
   */
  scheduleRestore(): void {
    if (this.bound.size === 0 || this.restoreTimer) return;
    this.restoreTimer = setTimeout(() => {
      this.restoreTimer = null;
      this.conn.inputLock
        .run(() => this.restoreNow())
        .catch(() => {
          /* display gone: nothing to restore */
        });
    }, RESTORE_IDLE_MS);
    this.restoreTimer.unref();
  }

  /** Reset temporarily bound keycodes (except held ones) to NoSymbol now (after the quiet time). */
  async restoreNow(): Promise<void> {
    this.cancelRestore();
    if (this.bound.size === 0 || this.conn.closed) return;
    const heldCodes = new Set([...this.held.values()].map((h) => h.keycode));
    const toReset = [...this.bound].filter(([, kc]) => !heldCodes.has(kc));
    if (toReset.length === 0) return;
    await this.quiet();
    const zeros = new Array<number>(this.perKeycode).fill(0);
    for (const [sym, kc] of toReset) {
      this.conn.assertOpen('ChangeKeyboardMapping');
      this.conn.x.ChangeKeyboardMapping(kc, this.perKeycode, zeros);
      this.bound.delete(sym);
    }
    await this.conn.sync();
  }
}

/** Upper-case keysym for Latin-1 letters (enough for the core lone-keysym rule on Xvfb's map). */
function upperKeysym(sym: number): number {
  if (sym >= 0x61 && sym <= 0x7a) return sym - 0x20;
  if (sym >= 0xe0 && sym <= 0xfe && sym !== 0xf7) return sym - 0x20;
  return sym;
}

// ─── Pointer ───

export type MouseButton = 'left' | 'middle' | 'right' | 'back' | 'forward' | number;

export interface ClickOptions {
  x?: number;
  y?: number;
  button?: MouseButton;
  /** 1..3 (default 1). */
  count?: number;
  /** Keys held during the click, e.g. ['shift']. */
  modifiers?: string[];
}

export interface DragOptions {
  button?: MouseButton;
  /** Pixels between intermediate motion events (default 20). */
  stepPx?: number;
  /** Pause between motion events (default 0; the round trip after each step already paces them). */
  stepDelayMs?: number;
}

export interface ScrollOptions {
  x?: number;
  y?: number;
  /** Wheel clicks; positive = right (button 7), negative = left (button 6). */
  dx?: number;
  /** Wheel clicks; positive = down (button 5), negative = up (button 4). */
  dy?: number;
  modifiers?: string[];
}

/** Button names → X button numbers (the canonical actions' names). */
export const BUTTONS: Readonly<Record<string, number>> = { left: 1, middle: 2, right: 3, back: 8, forward: 9 };
/** Gap between the presses of a double or triple click. */
const MULTI_CLICK_GAP_MS = 15;

export function buttonNumber(button: MouseButton | undefined): number {
  if (button === undefined) return 1;
  if (typeof button === 'number' && Number.isInteger(button) && button >= 1 && button <= 255) return button;
  const n = typeof button === 'string' ? BUTTONS[button.toLowerCase()] : undefined;
  if (n === undefined)
    throw new DisplayError('invalid_action', `button: must be left, middle, right, back, forward or 1..255 (got ${JSON.stringify(button)})`, {
      field: 'button',
    });
  return n;
}

function checkPoint(c: XConnection, x: number, y: number): void {
  if (!Number.isInteger(x) || x < 0 || x >= c.width)
    throw new DisplayError('invalid_action', `x: must be an integer within 0..${c.width - 1}`, { field: 'x', value: x });
  if (!Number.isInteger(y) || y < 0 || y >= c.height)
    throw new DisplayError('invalid_action', `y: must be an integer within 0..${c.height - 1}`, { field: 'y', value: y });
}

function fakeMotion(c: XConnection, x: number, y: number): void {
  c.fakeInput(FAKE.motion, 0 /* absolute */, x, y);
}

function fakeButton(c: XConnection, button: number, down: boolean): void {
  c.fakeInput(down ? FAKE.buttonPress : FAKE.buttonRelease, button);
}

export interface Point {
  x: number;
  y: number;
}

// Each entry point checks its arguments, then calls its trusted half (moveTo, clickAt, pressAt,
// dragAlong, wheelAt), which takes resolved values as given: runCanonical (actions.ts) calls
// those directly with steps that normalizeAction already validated.

export async function move(c: XConnection, x: number, y: number): Promise<void> {
  checkPoint(c, x, y);
  return moveTo(c, x, y);
}

/** Trusted: (x, y) is on the screen. */
export function moveTo(c: XConnection, x: number, y: number): Promise<void> {
  return c.inputLock.run(async () => {
    fakeMotion(c, x, y);
    await c.sync();
  });
}

/** The checked optional point (both of x and y, on the screen, or neither) and modifier keysyms of a click or scroll. */
function pointAndModifiers(c: XConnection, opts: { x?: number; y?: number; modifiers?: string[] }): { at: Point | undefined; mods: number[] } {
  if ((opts.x === undefined) !== (opts.y === undefined)) throw new DisplayError('invalid_action', 'x, y: give both or neither', { field: 'x' });
  if (opts.x !== undefined) checkPoint(c, opts.x, opts.y!);
  return { at: opts.x === undefined ? undefined : { x: opts.x, y: opts.y! }, mods: resolveKeyList(opts.modifiers ?? [], true) };
}

export async function click(c: XConnection, kb: Keyboard, opts: ClickOptions = {}): Promise<void> {
  const button = buttonNumber(opts.button);
  const count = opts.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > 3) throw new DisplayError('invalid_action', 'count: must be 1, 2 or 3', { field: 'count' });
  const { at, mods } = pointAndModifiers(c, opts);
  return clickAt(c, kb, at, button, count, mods);
}

/** Trusted: `at` on the screen (or the pointer stays), button 1..255, count 1..3, modifier keysyms. */
export function clickAt(c: XConnection, kb: Keyboard, at: Point | undefined, button: number, count: number, mods: number[]): Promise<void> {
  return c.inputLock.run(async () => {
    if (at) fakeMotion(c, at.x, at.y);
    await kb.withKeysHeld(mods, async () => {
      for (let i = 0; i < count; i++) {
        fakeButton(c, button, true);
        fakeButton(c, button, false);
        // Note: presses in the same server millisecond are not counted as a multi-click by
        // some toolkits (Chromium counts 1,2,2); space them like a fast human double-click.
        if (i < count - 1) {
          await c.sync();
          await sleep(MULTI_CLICK_GAP_MS);
        }
      }
    });
    kb.scheduleRestore();
    await c.sync();
  });
}

export async function mouseButton(c: XConnection, button: MouseButton, down: boolean, at?: { x: number; y: number }): Promise<void> {
  const b = buttonNumber(button);
  if (at) checkPoint(c, at.x, at.y);
  return pressAt(c, at, b, down);
}

/** Trusted: `at` on the screen (or the pointer stays), button 1..255. */
export function pressAt(c: XConnection, at: Point | undefined, button: number, down: boolean): Promise<void> {
  return c.inputLock.run(async () => {
    if (at) fakeMotion(c, at.x, at.y);
    fakeButton(c, button, down);
    await c.sync();
  });
}

export async function drag(c: XConnection, path: Array<{ x: number; y: number }>, opts: DragOptions = {}): Promise<void> {
  if (!Array.isArray(path) || path.length < 1) throw new DisplayError('invalid_action', 'path: needs at least one point', { field: 'path' });
  for (const p of path) checkPoint(c, p.x, p.y);
  const button = buttonNumber(opts.button);
  return dragAlong(c, path, button, Math.max(1, opts.stepPx ?? 20), opts.stepDelayMs ?? 0);
}

/** Trusted: at least one point, all on the screen; button 1..255; stepPx ≥ 1. One point drags from the pointer. */
export function dragAlong(c: XConnection, path: readonly Point[], button: number, stepPx = 20, delay = 0): Promise<void> {
  return c.inputLock.run(async () => {
    let points: readonly Point[] = path;
    if (points.length === 1) {
      // Drag from wherever the pointer is now.
      const p = await c.request<{ rootX: number; rootY: number }>('QueryPointer', (cb) => c.x.QueryPointer(c.root, cb));
      points = [{ x: p.rootX, y: p.rootY }, path[0]];
    }
    fakeMotion(c, points[0].x, points[0].y);
    await c.sync();
    fakeButton(c, button, true);
    await c.sync();
    let pressed = true;
    try {
      for (let i = 1; i < points.length; i++) {
        const a = points[i - 1],
          b = points[i];
        const steps = Math.min(50, Math.max(2, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y) / stepPx)));
        for (let s = 1; s <= steps; s++) {
          fakeMotion(c, Math.round(a.x + ((b.x - a.x) * s) / steps), Math.round(a.y + ((b.y - a.y) * s) / steps));
          await c.sync();
          if (delay > 0) await sleep(delay);
        }
      }
      fakeButton(c, button, false);
      pressed = false;
      await c.sync();
    } finally {
      // Never leave the button pressed on a live display.
      if (pressed && !c.closed) {
        try {
          fakeButton(c, button, false);
        } catch {
          /* closed */
        }
      }
    }
  });
}

export async function scroll(c: XConnection, kb: Keyboard, opts: ScrollOptions): Promise<void> {
  const dx = opts.dx ?? 0,
    dy = opts.dy ?? 0;
  for (const [k, v] of [
    ['dx', dx],
    ['dy', dy],
  ] as const) {
    if (!Number.isInteger(v) || Math.abs(v) > 1000) throw new DisplayError('invalid_action', `${k}: must be an integer within -1000..1000`, { field: k });
  }
  const { at, mods } = pointAndModifiers(c, opts);
  return wheelAt(c, kb, at, dx, dy, mods);
}

/** Trusted: `at` on the screen (or the pointer stays), |dx|, |dy| ≤ 1000 wheel clicks, modifier keysyms. */
export function wheelAt(c: XConnection, kb: Keyboard, at: Point | undefined, dx: number, dy: number, mods: number[]): Promise<void> {
  return c.inputLock.run(async () => {
    if (at) fakeMotion(c, at.x, at.y);
    await kb.withKeysHeld(mods, async () => {
      const vb = dy > 0 ? 5 : 4,
        hb = dx > 0 ? 7 : 6;
      for (let i = 0; i < Math.abs(dy); i++) {
        fakeButton(c, vb, true);
        fakeButton(c, vb, false);
      }
      for (let i = 0; i < Math.abs(dx); i++) {
        fakeButton(c, hb, true);
        fakeButton(c, hb, false);
      }
    });
    kb.scheduleRestore();
    await c.sync();
  });
}

export function wait(ms: number): Promise<void> {
  if (!Number.isFinite(ms) || ms < 0) return Promise.reject(new DisplayError('invalid_action', 'ms: must be a non-negative number', { field: 'ms' }));
  return sleep(ms);
}
