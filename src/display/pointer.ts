/**
 * Pointer input over XTEST FakeInput: motion, buttons, drags and the wheel. Every call holds the
 * connection's input lock (a click with modifiers uses the keyboard's keymap trick) and ends
 * with a round trip, so the server has processed the events before the promise resolves.
 */
import { DisplayError } from './errors.ts';
import { type Keyboard, resolveKeyList, sleep } from './keyboard.ts';
import { FAKE, type XConnection } from './x-connection.ts';

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

export async function click(c: XConnection, kb: Keyboard, opts: ClickOptions = {}): Promise<void> {
  const button = buttonNumber(opts.button);
  const count = opts.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > 3) throw new DisplayError('invalid_action', 'count: must be 1, 2 or 3', { field: 'count' });
  if ((opts.x === undefined) !== (opts.y === undefined)) throw new DisplayError('invalid_action', 'x, y: give both or neither', { field: 'x' });
  if (opts.x !== undefined) checkPoint(c, opts.x, opts.y!);
  const mods = resolveKeyList(opts.modifiers ?? [], true);
  return clickAt(c, kb, opts.x === undefined ? undefined : { x: opts.x, y: opts.y! }, button, count, mods);
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
  if ((opts.x === undefined) !== (opts.y === undefined)) throw new DisplayError('invalid_action', 'x, y: give both or neither', { field: 'x' });
  if (opts.x !== undefined) checkPoint(c, opts.x, opts.y!);
  const mods = resolveKeyList(opts.modifiers ?? [], true);
  return wheelAt(c, kb, opts.x === undefined ? undefined : { x: opts.x, y: opts.y! }, dx, dy, mods);
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
