// OSWorld /execute command normalisation: Python truthiness, shlex.split, `~/` expansion.

import { DESKTOP_HOME as HOME } from '../session/desktop-user.ts';

/** Python's bool(v) for JSON values. */
export function pyTruthy(v: unknown): boolean {
  if (v === undefined || v === null || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v as object).length > 0;
  return true;
}

/** POSIX-mode shlex.split (quotes, backslashes, no comments). Throws on unbalanced quotes, like Python. */
export function shlexSplit(s: string): string[] {
  const out: string[] = [];
  let cur = '';
  let inWord = false;
  let i = 0;
  while (i < s.length) {
    const ch = s[i]!;
    if (ch === "'") {
      const end = s.indexOf("'", i + 1);
      if (end < 0) throw new Error('No closing quotation');
      cur += s.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (ch === '"') {
      i++;
      let closed = false;
      while (i < s.length) {
        const c = s[i]!;
        if (c === '"') {
          closed = true;
          i++;
          break;
        }
        if (c === '\\' && i + 1 < s.length && '\\"$`\n'.includes(s[i + 1]!)) {
          cur += s[i + 1];
          i += 2;
          continue;
        }
        cur += c;
        i++;
      }
      if (!closed) throw new Error('No closing quotation');
      inWord = true;
    } else if (ch === '\\') {
      if (i + 1 >= s.length) throw new Error('No escaped character');
      cur += s[i + 1];
      inWord = true;
      i += 2;
    } else if (/\s/.test(ch)) {
      if (inWord) {
        out.push(cur);
        cur = '';
        inWord = false;
      }
      i++;
    } else {
      cur += ch;
      inWord = true;
      i++;
    }
  }
  if (inWord) out.push(cur);
  return out;
}

/** Python repr of a str or list of str (used in messages, as upstream's exceptions print them). */
export function pyRepr(v: unknown): string {
  if (typeof v === 'string') return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(', ')}]`;
  return JSON.stringify(v);
}

export interface Normalized {
  argv: string[];
  /** True when the command (as text) invokes sudo: it is then run as root-in-session. */
  sudo: boolean;
}

/**
 * Turns an OSWorld `{command, shell}` into an argv, the way subprocess.run does:
 * str + shell → sh -c str; list + shell → sh -c list[0] list[1:] ($0…);
 * str without shell → shlex.split; list without shell → `~/` items expanded.
 * Throws Error (a 500 at the route) on bad types, as Python would.
 */
export function normalizeCommand(command: unknown, shell: unknown): Normalized {
  const sh = pyTruthy(shell);
  let argv: string[];
  if (typeof command === 'string') {
    argv = sh ? ['/bin/sh', '-c', command] : shlexSplit(command);
  } else if (Array.isArray(command)) {
    if (!command.every((c) => typeof c === 'string')) throw new Error(`expected str, bytes or os.PathLike object in command, got ${pyRepr(command)}`);
    const items = command as string[];
    if (sh) {
      if (items.length === 0) throw new Error('list index out of range');
      argv = ['/bin/sh', '-c', ...items];
    } else {
      argv = items.map((c) => (c.startsWith('~/') ? HOME + c.slice(1) : c));
    }
  } else {
    throw new Error(`'command' must be a str or a list of str, got ${command === undefined ? 'nothing' : typeof command}`);
  }
  if (argv.length === 0) throw new Error('list index out of range');
  if (argv.some((a) => a.includes('\0'))) throw new Error('embedded null byte');
  const text = argv.join(' ');
  return { argv, sudo: /(^|[\s;&|(`$])sudo(\s|$)/.test(text) };
}

/** os.path.expanduser + os.path.expandvars for the desktop user's environment. */
export function expandPath(p: string, env: Record<string, string>): string {
  let s = p;
  if (s === '~' || s.startsWith('~/')) s = HOME + s.slice(1);
  return s.replace(/\$(\w+)|\$\{(\w+)\}/g, (m, a: string | undefined, b: string | undefined) => {
    const v = env[(a ?? b)!];
    return v === undefined ? m : v;
  });
}
