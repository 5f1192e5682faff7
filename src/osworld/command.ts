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
  /**
   * True when the argv really invokes sudo (`invokesSudo`). The route decides what that allows: only the
   * harness's own set-up routes (`/setup/...`) run such a command as root-in-session (routes/execute.ts).
   */
  sudo: boolean;
}

/** Words after which the next word is still in command position (`if sudo …`, `! sudo …`, `nohup sudo …`). */
const PREFIX_WORDS = new Set(['!', '{', 'then', 'do', 'else', 'elif', 'if', 'while', 'until', 'time', 'exec', 'nohup', 'command', 'builtin', 'setsid']);
const SHELLS = new Set(['sh', 'bash', 'dash']);

/**
 * Whether a shell script runs `sudo` as a command: a word `sudo` in command position (the script's start
 * or after `;` `&` `|` `(` `)` `` ` `` or a newline, past `NAME=value` assignments and PREFIX_WORDS), not
 * in a comment, not an argument (`echo sudo`), not inside quotes as part of a longer word. A light
 * scan, not a shell parser: what it misses (`eval "sudo x"`, `$(printf sudo) x`) runs unprivileged,
 * which fails closed.
 */
export function shellInvokesSudo(script: string): boolean {
  let word = '';
  let inWord = false;
  let commandPos = true;
  let quote: '' | "'" | '"' = '';
  const endWord = (): boolean => {
    if (!inWord) return false;
    const w = word;
    word = '';
    inWord = false;
    if (!commandPos) return false;
    if (w === 'sudo') return true;
    if (!/^[A-Za-z_][A-Za-z0-9_]*=/.test(w) && !PREFIX_WORDS.has(w)) commandPos = false;
    return false;
  };
  for (let i = 0; i < script.length; i++) {
    const ch = script[i]!;
    if (quote === "'") {
      if (ch === "'") quote = '';
      else word += ch;
      continue;
    }
    if (quote === '"') {
      if (ch === '"') quote = '';
      else if (ch === '\\' && i + 1 < script.length) word += script[++i];
      else word += ch;
      continue;
    }
    if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === '\\') {
      // A backslash-newline joins lines; any other escaped character is part of the word.
      if (script[i + 1] !== '\n') {
        word += script[i + 1] ?? '';
        inWord = true;
      }
      i++;
    } else if (ch === '#' && !inWord) {
      while (i < script.length && script[i] !== '\n') i++;
      commandPos = true;
    } else if (';&|()`\n'.includes(ch)) {
      if (endWord()) return true;
      commandPos = true;
    } else if (/\s/.test(ch)) {
      if (endWord()) return true;
    } else {
      word += ch;
      inWord = true;
    }
  }
  return endWord();
}

/** Whether an argv (as the guest would run it) invokes sudo: `sudo …` itself, or `sh -c SCRIPT` whose script does. */
export function invokesSudo(argv: string[]): boolean {
  const prog = argv[0]?.split('/').pop() ?? '';
  if (prog === 'sudo') return true;
  if (SHELLS.has(prog) && argv[1] === '-c' && typeof argv[2] === 'string') return shellInvokesSudo(argv[2]);
  return false;
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
  return { argv, sudo: invokesSudo(argv) };
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
