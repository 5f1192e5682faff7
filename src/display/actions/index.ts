/**
 * Reading and running actions of the canonical schema (schema.ts): adapters from other
 * vocabularies (OSWorld computer_13, Anthropic computer_20250124/20251124, E2B Desktop, cua
 * computer-server), validation with field paths, and runCanonical() to execute them on an
 * XDisplay. These stay in one file: they are the code POST /actions runs (docs/architecture.md's
 * trace counts the files it runs code in).
 *
 * normalizeAction() is pure: no X connection. It returns a list because one foreign action can
 * expand into several canonical steps (Anthropic `key` "ctrl+a Delete", `hold_key`, clicks with a
 * held modifier...). All coordinates in the input are in "agent space": the screenshot size the
 * agent saw (`scale`) if given, else the screen. The output is always in screen space.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { CancelledError } from '../../common/errors.ts';
import { DisplayError, invalidAction } from '../errors.ts';
import { charToKeysyms, keysymFromName, splitChord } from '../keysyms.ts';
import { BUTTONS as BUTTON_NUMBERS, clickAt, dragAlong, keyChord, keyToggle, moveTo, pressAt, resolveKeyList, typeText, wheelAt } from '../input.ts';
import { captureScreenshot } from '../frames.ts';
import { cursorPosition } from '../windows.ts';
import type { Region, ScreenshotFormat } from '../screenshot.ts';
import type { XDisplay } from '../x-display.ts';
import {
  type ActionResult,
  type BatchStep,
  BUTTONS,
  type Button,
  type CanonicalAction,
  DEFAULT_WAIT_MS,
  FORMATS,
  MAX_SCROLL_CLICKS,
  MAX_TEXT_LENGTH,
  MAX_WAIT_MS,
  type NormalizeOptions,
  type Point,
} from './schema.ts';

export * from './schema.ts';

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Coordinate space checks and mapping back to the screen. */
class Space {
  readonly w: number;
  readonly h: number;
  private readonly sx: number;
  private readonly sy: number;
  private readonly screen: { width: number; height: number };

  constructor(opts: NormalizeOptions) {
    this.screen = opts.screen;
    this.w = opts.scale?.width ?? opts.screen.width;
    this.h = opts.scale?.height ?? opts.screen.height;
    this.sx = opts.screen.width / this.w;
    this.sy = opts.screen.height / this.h;
  }

  coord(v: unknown, axis: 'x' | 'y', path: string): number {
    const max = (axis === 'x' ? this.w : this.h) - 1;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) {
      throw invalidAction(path, `must be an integer within 0..${max}`, { value: v });
    }
    if (this.sx === 1 && this.sy === 1) return v;
    const s = axis === 'x' ? this.sx : this.sy;
    const limit = (axis === 'x' ? this.screen.width : this.screen.height) - 1;
    return Math.min(limit, Math.round(v * s));
  }

  /** A length along an axis (for zoom regions given as corners). */
  toScreenX(v: number): number {
    return Math.min(this.screen.width, Math.round(v * this.sx));
  }
  toScreenY(v: number): number {
    return Math.min(this.screen.height, Math.round(v * this.sy));
  }
}

// ---------- field readers (each error names the field path) ----------

function has(p: Obj, k: string): boolean {
  return p[k] !== undefined && p[k] !== null;
}

function int(p: Obj, k: string, path: string, min: number, max: number, dflt?: number): number {
  const v = p[k];
  if (v === undefined || v === null) {
    if (dflt !== undefined) return dflt;
    throw invalidAction(`${path}.${k}`, `is required (an integer within ${min}..${max})`);
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalidAction(`${path}.${k}`, `must be an integer within ${min}..${max}`, { value: v });
  }
  return v;
}

function num(p: Obj, k: string, path: string, min: number, max: number, dflt?: number): number {
  const v = p[k];
  if (v === undefined || v === null) {
    if (dflt !== undefined) return dflt;
    throw invalidAction(`${path}.${k}`, `is required (a number within ${min}..${max})`);
  }
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw invalidAction(`${path}.${k}`, `must be a number within ${min}..${max}`, { value: v });
  }
  return v;
}

function str(p: Obj, k: string, path: string): string {
  const v = p[k];
  if (typeof v !== 'string') throw invalidAction(`${path}.${k}`, v === undefined ? 'is required (a string)' : 'must be a string');
  return v;
}

function text(p: Obj, k: string, path: string): string {
  const t = str(p, k, path);
  const chars = [...t];
  if (chars.length > MAX_TEXT_LENGTH) throw invalidAction(`${path}.${k}`, `is too long (${chars.length} characters, max ${MAX_TEXT_LENGTH})`);
  chars.forEach((ch, i) => {
    try {
      charToKeysyms(ch);
    } catch (err) {
      throw invalidAction(`${path}.${k}[${i}]`, (err as Error).message);
    }
  });
  return t;
}

function keyName(v: unknown, path: string): string {
  if (typeof v !== 'string' || v.length === 0) throw invalidAction(path, 'must be a non-empty key name');
  try {
    keysymFromName(v);
  } catch {
    throw new DisplayError('invalid_key', `${path}: unknown key ${JSON.stringify(v)}`, { field: path, key: v });
  }
  return v;
}

/** A chord given as 'ctrl+shift+t' or ['ctrl', 'shift', 't'] (elements may themselves be 'ctrl+c'). */
function chord(v: unknown, path: string): string[] {
  let names: string[];
  if (typeof v === 'string') {
    names = splitChord(v);
    names.forEach((n) => keyName(n, path));
  } else if (Array.isArray(v)) {
    if (v.length === 0) throw invalidAction(path, 'must name at least one key');
    names = [];
    v.forEach((k, i) => {
      if (typeof k === 'string' && k.length > 1 && k.includes('+')) splitChord(k).forEach((n) => names.push(keyName(n, `${path}[${i}]`)));
      else names.push(keyName(k, `${path}[${i}]`));
    });
  } else {
    throw invalidAction(path, 'must be a key name, a chord like "ctrl+c", or an array of key names');
  }
  if (names.length === 0) throw invalidAction(path, 'must name at least one key');
  return names;
}

function button(p: Obj, k: string, path: string, dflt: Button = 'left'): Button {
  const v = p[k];
  if (v === undefined || v === null) return dflt;
  if (typeof v === 'number' && [1, 2, 3, 8, 9].includes(v))
    return ({ 1: 'left', 2: 'middle', 3: 'right', 8: 'back', 9: 'forward' } as Record<number, Button>)[v];
  if (typeof v === 'string') {
    const b = v.toLowerCase() as Button;
    if (BUTTONS.includes(b)) return b;
  }
  throw invalidAction(`${path}.${k}`, `must be one of ${BUTTONS.join(', ')}`, { value: v });
}

/** A point from `coordinate: [x, y]` (or another array key) or from `x`/`y` keys. */
function point(p: Obj, path: string, sp: Space, opts: { required: boolean; arrayKey?: string; xKey?: string; yKey?: string }): Point | undefined {
  const ak = opts.arrayKey ?? 'coordinate';
  const xk = opts.xKey ?? 'x',
    yk = opts.yKey ?? 'y';
  if (has(p, ak)) return pointValue(p[ak], `${path}.${ak}`, sp);
  const hasX = has(p, xk),
    hasY = has(p, yk);
  if (hasX || hasY) {
    if (!hasX) throw invalidAction(`${path}.${xk}`, `is required when ${yk} is given`);
    if (!hasY) throw invalidAction(`${path}.${yk}`, `is required when ${xk} is given`);
    return { x: sp.coord(p[xk], 'x', `${path}.${xk}`), y: sp.coord(p[yk], 'y', `${path}.${yk}`) };
  }
  if (opts.required) throw invalidAction(`${path}.${ak}`, `is required ([x, y] or ${xk}/${yk})`);
  return undefined;
}

/** A point given as [x, y] or {x, y}. */
function pointValue(v: unknown, path: string, sp: Space): Point {
  if (Array.isArray(v)) {
    if (v.length !== 2) throw invalidAction(path, 'must be [x, y]');
    return { x: sp.coord(v[0], 'x', `${path}[0]`), y: sp.coord(v[1], 'y', `${path}[1]`) };
  }
  if (isObj(v)) return { x: sp.coord(v.x, 'x', `${path}.x`), y: sp.coord(v.y, 'y', `${path}.y`) };
  throw invalidAction(path, 'must be [x, y] or {x, y}');
}

function withPoint<T extends object>(a: T, pt: Point | undefined): T {
  return pt ? { ...a, x: pt.x, y: pt.y } : a;
}

function modifiersFrom(v: unknown, path: string): string[] | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  return chord(v, path);
}

function clickAction(pt: Point | undefined, btn: Button, count: number, mods?: string[]): CanonicalAction {
  const a: CanonicalAction = withPoint({ type: 'click', button: btn, count: count as 1 | 2 | 3 }, pt);
  if (mods?.length) (a as { modifiers?: string[] }).modifiers = mods;
  return a;
}

const DIRECTIONS: Record<string, [number, number]> = { up: [0, -1], down: [0, 1], left: [-1, 0], right: [1, 0] };

function direction(p: Obj, k: string, path: string, dflt?: string): [number, number] {
  const v = p[k] ?? dflt;
  if (typeof v !== 'string' || !(v.toLowerCase() in DIRECTIONS)) throw invalidAction(`${path}.${k}`, 'must be one of up, down, left, right', { value: v });
  return DIRECTIONS[v.toLowerCase()];
}

function scrollAction(pt: Point | undefined, dx: number, dy: number, path: string, mods?: string[]): CanonicalAction {
  if (dx === 0 && dy === 0) throw invalidAction(path, 'scroll needs a non-zero amount');
  const a = withPoint({ type: 'scroll' as const, dx, dy }, pt) as CanonicalAction;
  if (mods?.length) (a as { modifiers?: string[] }).modifiers = mods;
  return a;
}

function screenshotAction(p: Obj, path: string, opts: NormalizeOptions): CanonicalAction {
  const a: { type: 'screenshot'; format?: ScreenshotFormat; quality?: number; region?: Region; scale?: { width: number; height: number } } = {
    type: 'screenshot',
  };
  if (has(p, 'format')) {
    const f = p.format;
    if (typeof f !== 'string' || !FORMATS.includes(f as ScreenshotFormat)) throw invalidAction(`${path}.format`, `must be one of ${FORMATS.join(', ')}`);
    a.format = f as ScreenshotFormat;
  }
  if (has(p, 'quality')) a.quality = int(p, 'quality', path, 1, 100);
  if (has(p, 'region')) {
    const r = p.region;
    if (!isObj(r)) throw invalidAction(`${path}.region`, 'must be {x, y, width, height}');
    const x = int(r, 'x', `${path}.region`, 0, opts.screen.width - 1);
    const y = int(r, 'y', `${path}.region`, 0, opts.screen.height - 1);
    a.region = {
      x,
      y,
      width: int(r, 'width', `${path}.region`, 1, opts.screen.width - x),
      height: int(r, 'height', `${path}.region`, 1, opts.screen.height - y),
    };
  }
  if (has(p, 'scale')) {
    const s = p.scale;
    if (!isObj(s)) throw invalidAction(`${path}.scale`, 'must be {width, height}');
    a.scale = { width: int(s, 'width', `${path}.scale`, 1, 8192), height: int(s, 'height', `${path}.scale`, 1, 8192) };
  } else if (opts.scale && !a.region) {
    a.scale = { width: opts.scale.width, height: opts.scale.height };
  }
  return a;
}

// ---------- families ----------

type Handler = (p: Obj, path: string, sp: Space, opts: NormalizeOptions) => CanonicalAction[];

const canonical: Record<string, Handler> = {
  move: (p, path, sp) => [{ type: 'move', ...point(p, path, sp, { required: true })! }],
  click: (p, path, sp) => [
    clickAction(
      point(p, path, sp, { required: false }),
      button(p, 'button', path),
      int(p, 'count', path, 1, 3, 1),
      modifiersFrom(p.modifiers, `${path}.modifiers`),
    ),
  ],
  mouse_down: (p, path, sp) => [withPoint({ type: 'mouse_down', button: button(p, 'button', path) }, point(p, path, sp, { required: false }))],
  mouse_up: (p, path, sp) => [withPoint({ type: 'mouse_up', button: button(p, 'button', path) }, point(p, path, sp, { required: false }))],
  drag: (p, path, sp) => {
    const raw = p.path;
    if (!Array.isArray(raw) || raw.length < 1) throw invalidAction(`${path}.path`, 'must be an array of at least one point');
    if (raw.length > 1000) throw invalidAction(`${path}.path`, 'has more than 1000 points');
    return [{ type: 'drag', path: raw.map((v, i) => pointValue(v, `${path}.path[${i}]`, sp)), button: button(p, 'button', path) }];
  },
  scroll: (p, path, sp) =>
    scrollActionFrom(p, path, sp, int(p, 'dx', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0), int(p, 'dy', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0)),
  key: (p, path) => {
    if (has(p, 'keys')) return [{ type: 'key', keys: chord(p.keys, `${path}.keys`) }];
    if (has(p, 'key')) return [{ type: 'key', keys: chord(p.key, `${path}.key`) }];
    // Anthropic/xdotool: "ctrl+a Delete" = two chords in sequence.
    const t = str(p, 'text', path).trim();
    if (!t) throw invalidAction(`${path}.text`, 'must name at least one key');
    return t.split(/\s+/).map((c) => ({ type: 'key' as const, keys: chord(c, `${path}.text`) }));
  },
  key_down: (p, path) => [{ type: 'key_down', key: keyName(p.key, `${path}.key`) }],
  key_up: (p, path) => [{ type: 'key_up', key: keyName(p.key, `${path}.key`) }],
  type: (p, path) => [{ type: 'type', text: text(p, 'text', path) }],
  wait: (p, path) => {
    if (has(p, 'ms')) return [{ type: 'wait', ms: num(p, 'ms', path, 0, MAX_WAIT_MS) }];
    if (has(p, 'duration')) return [{ type: 'wait', ms: Math.round(num(p, 'duration', path, 0, MAX_WAIT_MS / 1000) * 1000) }];
    return [{ type: 'wait', ms: DEFAULT_WAIT_MS }];
  },
  screenshot: (p, path, _sp, opts) => [screenshotAction(p, path, opts)],
  cursor_position: () => [{ type: 'cursor_position' }],
  done: (p, path) => {
    const s = p.status ?? 'done';
    if (s !== 'done' && s !== 'fail') throw invalidAction(`${path}.status`, 'must be done or fail');
    return [{ type: 'done', status: s }];
  },
};

/** Scroll with position from coordinate/x,y and direction from whatever the family uses. */
function scrollActionFrom(p: Obj, path: string, sp: Space, dx: number, dy: number): CanonicalAction[] {
  const mods = modifiersFrom(p.modifiers ?? p.text, `${path}.${has(p, 'modifiers') ? 'modifiers' : 'text'}`);
  return [scrollAction(point(p, path, sp, { required: false }), dx, dy, path, mods)];
}

function anthropicClick(btn: Button, count: number): Handler {
  return (p, path, sp) => [clickAction(point(p, path, sp, { required: false }), btn, count, modifiersFrom(p.text, `${path}.text`))];
}

/** Anthropic computer_20250124 / 20251124 (`{action: ...}`). */
const anthropic: Record<string, Handler> = {
  mouse_move: canonical.move,
  left_click: anthropicClick('left', 1),
  right_click: anthropicClick('right', 1),
  middle_click: anthropicClick('middle', 1),
  double_click: anthropicClick('left', 2),
  triple_click: anthropicClick('left', 3),
  left_mouse_down: (p, path, sp) => [withPoint({ type: 'mouse_down', button: 'left' }, point(p, path, sp, { required: false }))],
  left_mouse_up: (p, path, sp) => [withPoint({ type: 'mouse_up', button: 'left' }, point(p, path, sp, { required: false }))],
  left_click_drag: (p, path, sp) => {
    const to = point(p, path, sp, { required: true })!;
    const from = has(p, 'start_coordinate') ? pointValue(p.start_coordinate, `${path}.start_coordinate`, sp) : undefined;
    return [{ type: 'drag', path: from ? [from, to] : [to], button: 'left' }];
  },
  key: canonical.key,
  type: canonical.type,
  hold_key: (p, path) => {
    const keys = chord(str(p, 'text', path), `${path}.text`);
    const ms = Math.round(num(p, 'duration', path, 0, MAX_WAIT_MS / 1000) * 1000);
    return [
      ...keys.map((k) => ({ type: 'key_down' as const, key: k })),
      { type: 'wait', ms },
      ...keys
        .slice()
        .reverse()
        .map((k) => ({ type: 'key_up' as const, key: k })),
    ];
  },
  scroll: (p, path, sp, o) => {
    if (!has(p, 'scroll_direction')) return e2b.scroll(p, path, sp, o); // E2B / canonical shapes
    const [ux, uy] = direction(p, 'scroll_direction', path);
    const n = int(p, 'scroll_amount', path, 0, MAX_SCROLL_CLICKS, 1);
    return scrollActionFrom(p, path, sp, ux * n, uy * n);
  },
  wait: canonical.wait,
  screenshot: canonical.screenshot,
  cursor_position: canonical.cursor_position,
  zoom: (p, path, sp) => {
    const r = p.region;
    if (!Array.isArray(r) || r.length !== 4) throw invalidAction(`${path}.region`, 'must be [x0, y0, x1, y1]');
    const x0 = sp.coord(r[0], 'x', `${path}.region[0]`),
      y0 = sp.coord(r[1], 'y', `${path}.region[1]`);
    if (typeof r[2] !== 'number' || !Number.isInteger(r[2]) || r[2] <= (r[0] as number) || r[2] > sp.w)
      throw invalidAction(`${path}.region[2]`, `must be an integer within ${(r[0] as number) + 1}..${sp.w}`);
    if (typeof r[3] !== 'number' || !Number.isInteger(r[3]) || r[3] <= (r[1] as number) || r[3] > sp.h)
      throw invalidAction(`${path}.region[3]`, `must be an integer within ${(r[1] as number) + 1}..${sp.h}`);
    const x1 = sp.toScreenX(r[2]),
      y1 = sp.toScreenY(r[3]);
    return [{ type: 'screenshot', region: { x: x0, y: y0, width: Math.max(1, x1 - x0), height: Math.max(1, y1 - y0) } }];
  },
};

function e2bClick(btn: Button, count: number): Handler {
  return (p, path, sp) => [clickAction(point(p, path, sp, { required: false }), btn, count)];
}

/** E2B Desktop SDK method names (JS camelCase and Python snake_case). */
const e2b: Record<string, Handler> = {
  leftClick: e2bClick('left', 1),
  rightClick: e2bClick('right', 1),
  middleClick: e2bClick('middle', 1),
  doubleClick: e2bClick('left', 2),
  moveMouse: canonical.move,
  move_mouse: canonical.move,
  mousePress: canonical.mouse_down,
  mouse_press: canonical.mouse_down,
  mouseRelease: canonical.mouse_up,
  mouse_release: canonical.mouse_up,
  drag: (p, path, sp) => {
    if (has(p, 'path')) return canonical.drag(p, path, sp, undefined as never);
    const from = pointValue(p.from ?? p.fr, `${path}.from`, sp);
    const to = pointValue(p.to, `${path}.to`, sp);
    return [{ type: 'drag', path: [from, to], button: 'left' }];
  },
  scroll: (p, path, sp) => {
    if (has(p, 'scroll_direction')) return anthropic.scroll(p, path, sp, undefined as never);
    if (has(p, 'dx') || has(p, 'dy')) return canonical.scroll(p, path, sp, undefined as never);
    const [ux, uy] = direction(p, 'direction', path, 'down');
    const n = int(p, 'amount', path, 0, MAX_SCROLL_CLICKS, 1);
    return scrollActionFrom(p, path, sp, ux * n, uy * n);
  },
  write: canonical.type,
  press: (p, path) => [{ type: 'key', keys: chord(p.key ?? p.keys, `${path}.${has(p, 'key') ? 'key' : 'keys'}`) }],
  wait: canonical.wait,
  getCursorPosition: canonical.cursor_position,
  get_cursor_position: canonical.cursor_position,
  screenshot: canonical.screenshot,
};

/** cua computer-server command names (`{command, params}`). */
const cua: Record<string, Handler> = {
  left_click: e2bClick('left', 1),
  click: e2bClick('left', 1),
  right_click: e2bClick('right', 1),
  double_click: e2bClick('left', 2),
  middle_click: e2bClick('middle', 1),
  move_cursor: canonical.move,
  mouse_down: canonical.mouse_down,
  mouse_up: canonical.mouse_up,
  drag_to: (p, path, sp) => [{ type: 'drag', path: [point(p, path, sp, { required: true })!], button: button(p, 'button', path) }],
  drag: canonical.drag,
  type_text: canonical.type,
  press_key: (p, path) => [{ type: 'key', keys: chord(p.key, `${path}.key`) }],
  hotkey: (p, path) => [{ type: 'key', keys: chord(p.keys, `${path}.keys`) }],
  key_down: canonical.key_down,
  key_up: canonical.key_up,
  // cua scroll(x, y): amounts, pyautogui signs (y > 0 scrolls up, x > 0 scrolls right).
  scroll: (p, path) => [
    scrollAction(undefined, int(p, 'x', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0), -int(p, 'y', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0), path),
  ],
  scroll_up: (p, path) => [scrollAction(undefined, 0, -int(p, 'clicks', path, 1, MAX_SCROLL_CLICKS, 1), path)],
  scroll_down: (p, path) => [scrollAction(undefined, 0, int(p, 'clicks', path, 1, MAX_SCROLL_CLICKS, 1), path)],
  scroll_direction: (p, path) => {
    const [ux, uy] = direction(p, 'direction', path);
    const n = int(p, 'clicks', path, 1, MAX_SCROLL_CLICKS, (p.amount as number | undefined) ?? 1);
    return [scrollAction(undefined, ux * n, uy * n, path)];
  },
  get_cursor_position: canonical.cursor_position,
  screenshot: canonical.screenshot,
  wait: canonical.wait,
};

/** OSWorld computer_13 (`{action_type, parameters}`; parameters may also be flat). */
const osworld: Record<string, Handler> = {
  MOVE_TO: canonical.move,
  CLICK: (p, path, sp) => [clickAction(point(p, path, sp, { required: false }), button(p, 'button', path), int(p, 'num_clicks', path, 1, 3, 1))],
  MOUSE_DOWN: canonical.mouse_down,
  MOUSE_UP: canonical.mouse_up,
  RIGHT_CLICK: e2bClick('right', 1),
  DOUBLE_CLICK: e2bClick('left', 2),
  DRAG_TO: (p, path, sp) => [{ type: 'drag', path: [point(p, path, sp, { required: true })!], button: 'left' }],
  // pyautogui: vscroll(dy > 0) scrolls up, hscroll(dx > 0) scrolls right.
  SCROLL: (p, path) => [
    scrollAction(undefined, int(p, 'dx', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0), -int(p, 'dy', path, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0), path),
  ],
  TYPING: canonical.type,
  PRESS: (p, path) => [{ type: 'key', keys: [keyName(p.key, `${path}.key`)] }],
  KEY_DOWN: canonical.key_down,
  KEY_UP: canonical.key_up,
  HOTKEY: (p, path) => {
    if (!Array.isArray(p.keys)) throw invalidAction(`${path}.keys`, 'must be an array of key names');
    return [{ type: 'key', keys: chord(p.keys, `${path}.keys`) }];
  },
  WAIT: () => [{ type: 'wait', ms: DEFAULT_WAIT_MS }],
  DONE: () => [{ type: 'done', status: 'done' }],
  FAIL: () => [{ type: 'done', status: 'fail' }],
};

const anyFamily: Array<Record<string, Handler>> = [canonical, anthropic, e2b, cua];

/**
 * Validate one action in any supported vocabulary and return its canonical step(s), in screen
 * coordinates. Throws DisplayError `invalid_action` (or `invalid_key`) whose message starts with
 * the failing field path.
 */
export function normalizeAction(input: unknown, opts: NormalizeOptions, path = 'action'): CanonicalAction[] {
  const sp = new Space(opts);
  if (typeof input === 'string') {
    const h = osworld[input.toUpperCase()];
    if (h && ['WAIT', 'DONE', 'FAIL'].includes(input.toUpperCase())) return h({}, path, sp, opts);
    throw invalidAction(path, 'must be an action object (code strings are not executed; only WAIT, DONE, FAIL are accepted as strings)');
  }
  if (!isObj(input)) throw invalidAction(path, 'must be an object');

  if (has(input, 'action_type')) {
    const name = input.action_type;
    if (typeof name !== 'string' || !osworld[name.toUpperCase()]) throw invalidAction(`${path}.action_type`, `unknown action ${JSON.stringify(name)}`);
    const nested = isObj(input.parameters);
    const params = nested ? (input.parameters as Obj) : input;
    return osworld[name.toUpperCase()](params, nested ? `${path}.parameters` : path, sp, opts);
  }
  if (has(input, 'command')) {
    const name = input.command;
    if (typeof name !== 'string' || !cua[name]) throw invalidAction(`${path}.command`, `unknown command ${JSON.stringify(name)}`);
    const nested = isObj(input.params);
    return cua[name](nested ? (input.params as Obj) : input, nested ? `${path}.params` : path, sp, opts);
  }
  const key = has(input, 'type') ? 'type' : has(input, 'action') ? 'action' : null;
  if (!key) throw invalidAction(`${path}.type`, 'is required');
  const name = input[key];
  if (typeof name !== 'string') throw invalidAction(`${path}.${key}`, 'must be a string');
  // `type` is canonical first; `action` is Anthropic first, then E2B. Either falls back to the others.
  const order = key === 'type' ? anyFamily : [anthropic, e2b, canonical, cua];
  for (const fam of order) {
    const h = Object.hasOwn(fam, name) ? fam[name] : undefined;
    if (h) return h(input, path, sp, opts);
  }
  throw invalidAction(`${path}.${key}`, `unknown action ${JSON.stringify(name)}`);
}

/** Normalize a batch once (paths are `actions[i]...`): the canonical steps that runCanonical trusts. */
export function normalizeBatch(inputs: unknown, opts: NormalizeOptions): BatchStep[] {
  if (!Array.isArray(inputs)) throw invalidAction('actions', 'must be an array');
  return inputs.flatMap((a, i) => normalizeAction(a, opts, `actions[${i}]`).map((action) => ({ index: i, action })));
}

/** Normalize a list; paths are `actions[i]...`. */
export function normalizeActions(inputs: unknown, opts: NormalizeOptions): CanonicalAction[] {
  return normalizeBatch(inputs, opts).map((s) => s.action);
}

/**
 * Execute one canonical action (already normalized, screen coordinates): straight to the
 * trusted halves of input.ts (pointer and keyboard) on the display's connection, which check nothing
 * again. Key names are only resolved to keysyms (normalizeAction has checked them).
 */
export async function runAction(d: XDisplay, a: CanonicalAction): Promise<Omit<ActionResult, 'index' | 'ms'>> {
  const { conn: c, keyboard: kb } = d;
  const at = (p: { x?: number; y?: number }) => (p.x === undefined ? undefined : { x: p.x, y: p.y! });
  const mods = (m: string[] | undefined) => resolveKeyList(m ?? [], true);
  switch (a.type) {
    case 'move':
      await moveTo(c, a.x, a.y);
      break;
    case 'click':
      await clickAt(c, kb, at(a), BUTTON_NUMBERS[a.button], a.count, mods(a.modifiers));
      break;
    case 'mouse_down':
    case 'mouse_up':
      await pressAt(c, at(a), BUTTON_NUMBERS[a.button], a.type === 'mouse_down');
      break;
    case 'drag':
      await dragAlong(c, a.path, BUTTON_NUMBERS[a.button]);
      break;
    case 'scroll':
      await wheelAt(c, kb, at(a), a.dx, a.dy, mods(a.modifiers));
      break;
    case 'key':
      await keyChord(kb, a.keys);
      break;
    case 'key_down':
    case 'key_up':
      await keyToggle(kb, a.key, a.type === 'key_down');
      break;
    case 'type':
      await typeText(kb, a.text);
      break;
    case 'wait':
      await sleep(a.ms);
      break;
    case 'screenshot':
      return { type: a.type, screenshot: await captureScreenshot(c, { format: a.format, quality: a.quality, region: a.region, scale: a.scale }) };
    case 'cursor_position':
      return { type: a.type, cursor: await cursorPosition(c) };
    case 'done':
      return { type: a.type, status: a.status };
  }
  return { type: a.type };
}

/**
 * Run already normalized steps (normalizeBatch) in order, stopping at the first failure, which
 * rethrows as a DisplayError with the same code and `details.index` / `details.results`. The
 * steps are trusted: nothing here validates them again. An aborted `signal` (the client went
 * away) stops the batch between steps and cuts a `wait` short (CancelledError).
 */
export async function runCanonical(d: XDisplay, steps: readonly BatchStep[], opts: { signal?: AbortSignal } = {}): Promise<ActionResult[]> {
  const { signal } = opts;
  const results: ActionResult[] = [];
  const cancelled = (index: number) =>
    new CancelledError(`actions[${index}]: the batch was cancelled after ${results.length} of ${steps.length} steps`, { index, results });
  for (const { index, action } of steps) {
    if (signal?.aborted) throw cancelled(index);
    const t0 = performance.now();
    try {
      const r = action.type === 'wait' && signal ? await abortableWait(action.ms, signal) : await runAction(d, action);
      results.push({ ...r, index, ms: performance.now() - t0 });
    } catch (err) {
      if (signal?.aborted) throw cancelled(index);
      const e = err as DisplayError;
      const code = e instanceof DisplayError ? e.code : 'x_error';
      throw new DisplayError(code, `actions[${index}] (${action.type}): ${e.message}`, { ...(e.details ?? {}), index, results }, err);
    }
  }
  return results;
}

async function abortableWait(ms: number, signal: AbortSignal): Promise<Omit<ActionResult, 'index' | 'ms'>> {
  await sleep(ms, undefined, { signal });
  return { type: 'wait' };
}

/**
 * Validate and run actions in any supported vocabulary (normalizeBatch, then runCanonical).
 * Coordinates are taken in `scale` space when given (else screen space). Nothing runs if any
 * action is malformed.
 */
export async function runActions(
  d: XDisplay,
  actions: readonly unknown[],
  opts: { scale?: { width: number; height: number }; signal?: AbortSignal } = {},
): Promise<ActionResult[]> {
  return runCanonical(d, normalizeBatch(actions, { screen: { width: d.width, height: d.height }, scale: opts.scale }), { signal: opts.signal });
}
