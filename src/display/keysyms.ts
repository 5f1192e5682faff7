/**
 * Key names and characters → X keysyms. Pure data, no X connection.
 *
 * Accepted key names, tried in this order:
 *  1. an exact X keysym name (`Return`, `ctrl` is not one, `KP_Enter`, `EuroSign`)
 *  2. an alias from pyautogui / Anthropic / E2B / DOM vocabularies (`enter`, `esc`, `pagedown`,
 *     `win`, `super`, `cmd`, `page_down`, `ArrowUp`), compared lower-case with `_`, `-` and spaces removed
 *  3. an X keysym name compared case-insensitively (`backspace` → `BackSpace`, `f5` → `F5`)
 *  4. a single character (`a`, `A`, `<`, `é`, `日`)
 *  5. `U+20AC` / `U20AC` (Unicode) or `0xff0d` (a raw keysym)
 */
import x11 from 'x11';
import { DisplayError } from './errors.ts';

export const KEYSYM_RETURN = 0xff0d;
export const KEYSYM_TAB = 0xff09;
export const KEYSYM_BACKSPACE = 0xff08;
export const KEYSYM_SHIFT_L = 0xffe1;

const exactNames = new Map<string, number>();
const foldedNames = new Map<string, number>();
const legacyByChar = new Map<number, number>(); // code point (> 0xff) → legacy keysym

function fold(name: string): string {
  return name.toLowerCase().replace(/[\s_-]+/g, '');
}

for (const [key, entry] of Object.entries(x11.keySyms)) {
  const name = key.startsWith('XK_') ? key.slice(3) : key;
  if (!exactNames.has(name)) exactNames.set(name, entry.code);
  const folded = fold(name);
  // Prefer the first spelling for case-folded collisions (e.g. `a` before `A`).
  if (!foldedNames.has(folded)) foldedNames.set(folded, entry.code);
  const m = entry.description ? /^\((.+?)\) /.exec(entry.description) : null;
  if (m) {
    const chars = [...m[1]];
    if (chars.length === 1) {
      const cp = chars[0].codePointAt(0)!;
      if (cp > 0xff && !legacyByChar.has(cp) && entry.code < 0x1000000) legacyByChar.set(cp, entry.code);
    }
  }
}

// XF86 keysyms are not in x11's keysymdef table.
const XF86: Record<string, number> = {
  XF86AudioLowerVolume: 0x1008ff11,
  XF86AudioMute: 0x1008ff12,
  XF86AudioRaiseVolume: 0x1008ff13,
  XF86AudioPlay: 0x1008ff14,
  XF86AudioStop: 0x1008ff15,
  XF86AudioPrev: 0x1008ff16,
  XF86AudioNext: 0x1008ff17,
  XF86HomePage: 0x1008ff18,
  XF86Mail: 0x1008ff19,
  XF86Search: 0x1008ff1b,
  XF86Back: 0x1008ff26,
  XF86Forward: 0x1008ff27,
  XF86Stop: 0x1008ff28,
  XF86Refresh: 0x1008ff29,
  XF86Sleep: 0x1008ff2f,
  XF86Favorites: 0x1008ff30,
  XF86AudioMedia: 0x1008ff32,
  XF86Calculator: 0x1008ff1d,
};
for (const [name, code] of Object.entries(XF86)) {
  exactNames.set(name, code);
  foldedNames.set(fold(name), code);
}

/** Alias (folded) → X keysym name. Keys are already folded (lower-case, no `_-` or spaces). */
const ALIASES: Record<string, string> = {
  enter: 'Return',
  return: 'Return',
  ret: 'Return',
  kpenter: 'KP_Enter',
  esc: 'Escape',
  escape: 'Escape',
  tab: 'Tab',
  space: 'space',
  spacebar: 'space',
  backspace: 'BackSpace',
  bs: 'BackSpace',
  back: 'BackSpace',
  delete: 'Delete',
  del: 'Delete',
  insert: 'Insert',
  ins: 'Insert',
  home: 'Home',
  end: 'End',
  pageup: 'Prior',
  pgup: 'Prior',
  prior: 'Prior',
  pagedown: 'Next',
  pgdn: 'Next',
  next: 'Next',
  up: 'Up',
  down: 'Down',
  left: 'Left',
  right: 'Right',
  arrowup: 'Up',
  arrowdown: 'Down',
  arrowleft: 'Left',
  arrowright: 'Right',
  ctrl: 'Control_L',
  control: 'Control_L',
  ctrlleft: 'Control_L',
  leftctrl: 'Control_L',
  lctrl: 'Control_L',
  controlleft: 'Control_L',
  ctrlright: 'Control_R',
  rightctrl: 'Control_R',
  rctrl: 'Control_R',
  controlright: 'Control_R',
  shift: 'Shift_L',
  shiftleft: 'Shift_L',
  leftshift: 'Shift_L',
  lshift: 'Shift_L',
  shiftright: 'Shift_R',
  rightshift: 'Shift_R',
  rshift: 'Shift_R',
  alt: 'Alt_L',
  altleft: 'Alt_L',
  leftalt: 'Alt_L',
  lalt: 'Alt_L',
  option: 'Alt_L',
  optionleft: 'Alt_L',
  altright: 'Alt_R',
  rightalt: 'Alt_R',
  ralt: 'Alt_R',
  optionright: 'Alt_R',
  altgr: 'ISO_Level3_Shift',
  win: 'Super_L',
  winleft: 'Super_L',
  leftwin: 'Super_L',
  lwin: 'Super_L',
  windows: 'Super_L',
  super: 'Super_L',
  superleft: 'Super_L',
  cmd: 'Super_L',
  command: 'Super_L',
  os: 'Super_L',
  winright: 'Super_R',
  rightwin: 'Super_R',
  rwin: 'Super_R',
  superright: 'Super_R',
  meta: 'Meta_L',
  metaleft: 'Meta_L',
  metaright: 'Meta_R',
  hyper: 'Hyper_L',
  capslock: 'Caps_Lock',
  caps: 'Caps_Lock',
  numlock: 'Num_Lock',
  scrolllock: 'Scroll_Lock',
  printscreen: 'Print',
  print: 'Print',
  prtsc: 'Print',
  prtscr: 'Print',
  prntscrn: 'Print',
  prtscn: 'Print',
  snapshot: 'Print',
  pause: 'Pause',
  break: 'Break',
  apps: 'Menu',
  menu: 'Menu',
  contextmenu: 'Menu',
  clear: 'Clear',
  help: 'Help',
  select: 'Select',
  execute: 'Execute',
  find: 'Find',
  undo: 'Undo',
  redo: 'Redo',
  num0: 'KP_0',
  num1: 'KP_1',
  num2: 'KP_2',
  num3: 'KP_3',
  num4: 'KP_4',
  num5: 'KP_5',
  num6: 'KP_6',
  num7: 'KP_7',
  num8: 'KP_8',
  num9: 'KP_9',
  add: 'KP_Add',
  subtract: 'KP_Subtract',
  multiply: 'KP_Multiply',
  divide: 'KP_Divide',
  decimal: 'KP_Decimal',
  separator: 'KP_Separator',
  volumeup: 'XF86AudioRaiseVolume',
  volumedown: 'XF86AudioLowerVolume',
  volumemute: 'XF86AudioMute',
  playpause: 'XF86AudioPlay',
  nexttrack: 'XF86AudioNext',
  prevtrack: 'XF86AudioPrev',
  stop: 'XF86AudioStop',
  browserback: 'XF86Back',
  browserforward: 'XF86Forward',
  browserrefresh: 'XF86Refresh',
  browserstop: 'XF86Stop',
  browserhome: 'XF86HomePage',
  browsersearch: 'XF86Search',
  browserfavorites: 'XF86Favorites',
  launchmail: 'XF86Mail',
  launchmediaselect: 'XF86AudioMedia',
  sleep: 'XF86Sleep',
  plus: 'plus',
  minus: 'minus',
};

/** Single characters that name control keys (pyautogui KEYBOARD_KEYS has `\t`, `\n`, `\r`). */
const CONTROL_CHARS: Record<string, number> = {
  '\n': KEYSYM_RETURN,
  '\r': KEYSYM_RETURN,
  '\t': KEYSYM_TAB,
  '\b': KEYSYM_BACKSPACE,
};

/**
 * Keysyms for one character, best first: the Latin-1 / legacy keysym if one exists, then the
 * Unicode keysym (0x01000000 | code point). Throws `invalid_key` for other control characters.
 */
export function charToKeysyms(ch: string): number[] {
  if (ch in CONTROL_CHARS) return [CONTROL_CHARS[ch]];
  const cp = ch.codePointAt(0)!;
  if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff)) return [cp];
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
    throw new DisplayError('invalid_key', `cannot type control character U+${cp.toString(16).padStart(4, '0').toUpperCase()}`, { key: ch });
  }
  const legacy = legacyByChar.get(cp);
  const unicode = 0x1000000 | cp;
  return legacy === undefined ? [unicode] : [legacy, unicode];
}

/** Resolve one key name (see module doc) to a keysym; throws DisplayError `invalid_key`. */
export function keysymFromName(name: string): number {
  if (typeof name !== 'string' || name.length === 0) {
    throw new DisplayError('invalid_key', `invalid key name ${JSON.stringify(name)}`, { key: name });
  }
  const exact = exactNames.get(name);
  if (exact !== undefined) return exact;
  const folded = fold(name);
  const alias = folded.length > 1 ? ALIASES[folded] : undefined;
  if (alias !== undefined) return exactNames.get(alias)!;
  if (folded.length > 1) {
    const ci = foldedNames.get(folded);
    if (ci !== undefined) return ci;
  }
  const chars = [...name];
  if (chars.length === 1) return charToKeysyms(name)[0];
  let m = /^U\+?([0-9a-fA-F]{4,6})$/.exec(name);
  if (m) {
    const cp = parseInt(m[1], 16);
    if (cp <= 0x10ffff) return cp <= 0xff && cp >= 0x20 ? cp : 0x1000000 | cp;
  }
  m = /^0x([0-9a-fA-F]{1,8})$/.exec(name);
  if (m) return parseInt(m[1], 16);
  throw new DisplayError('invalid_key', `unknown key name ${JSON.stringify(name)}`, { key: name });
}

/**
 * Split a chord like `ctrl+shift+t` (xdotool / Anthropic style) into key names. A `+` that is the
 * key itself is written as `plus` or as a trailing `+` (`ctrl++`).
 */
export function splitChord(chord: string): string[] {
  if (chord === '+') return ['+'];
  const parts = chord.split('+');
  const out: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i].trim();
    if (p === '') {
      // `ctrl++` → ['ctrl', '', ''] : an empty piece followed by the end means a literal '+'
      if (i === parts.length - 1 && out.length > 0 && parts[i - 1] === '') out.push('+');
      continue;
    }
    out.push(p);
  }
  return out;
}

/** Validate a key name without an X connection; returns the keysym or throws `invalid_key`. */
export function validateKeyName(name: string): number {
  return keysymFromName(name);
}

const modifierKeysyms = new Set([
  0xffe1,
  0xffe2,
  0xffe3,
  0xffe4,
  0xffe5,
  0xffe6,
  0xffe7,
  0xffe8,
  0xffe9,
  0xffea,
  0xffeb,
  0xffec,
  0xffed,
  0xffee,
  0xfe03, // ISO_Level3_Shift
]);

export function isModifierKeysym(keysym: number): boolean {
  return modifierKeysyms.has(keysym);
}
