import type { ChildProcess } from 'node:child_process';
import { DrumsError, ValidationError } from '../common/errors.ts';
import type { OciRuntime } from '../host/oci-runtime.ts';
import { ROOT_CAPS } from '../host/oci-spec.ts';
import type { ExecRequest } from './exec.ts';

/**
 * Files of a session, read and written by small commands run INSIDE the
 * session through the OCI runtime (`runc exec`): the path is one argv
 * element of a fixed command (never parsed by a shell), so symlinks, `..` and
 * /proc/self/root resolve in the container's own mount namespace and root.
 * Writes land in the session's overlay upper layer; the image stays
 * read-only. As the desktop user by default; `root` = root-in-session (still
 * confined: ROOT_CAPS only, no_new_privs, seccomp).
 */

export const MAX_PATH_LENGTH = 4096;
export const MAX_READ_BYTES = 64 * 1024 * 1024;
const TIMEOUT_MS = 30_000;

export interface RunOptions {
  root?: boolean;
  stdin?: Buffer;
  maxOutputBytes?: number;
  timeoutMs?: number;
}

export interface RunResult {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
  truncated: boolean;
}

export interface Target {
  runtime: OciRuntime;
  container: string;
  env: Record<string, string>;
}

function spawnIn(t: Target, args: string[], root: boolean, timeoutMs: number, env?: Record<string, string>, cwd?: string): ChildProcess {
  const secs = Math.max(0.001, timeoutMs / 1000).toFixed(3);
  return t.runtime.spawnExec(t.container, {
    uid: root ? 0 : 1000,
    gid: root ? 0 : 1000,
    cwd: cwd ?? (root ? '/root' : '/home/user'),
    env: { ...t.env, ...(root ? { HOME: '/root', USER: 'root', LOGNAME: 'root' } : {}), ...env },
    caps: root ? ROOT_CAPS : [],
    args: ['/usr/bin/timeout', '--kill-after=2', '--signal=TERM', secs, ...args],
  });
}

/** Runs argv in the session with binary stdin/stdout. A non-zero exit is a result. */
export function runInSession(t: Target, argv: string[], o: RunOptions = {}): Promise<RunResult> {
  const cap = o.maxOutputBytes ?? MAX_READ_BYTES;
  const timeoutMs = o.timeoutMs ?? TIMEOUT_MS;
  const child = spawnIn(t, argv, !!o.root, timeoutMs);
  return new Promise((resolve, reject) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let truncated = false;
    child.stdout!.on('data', (d: Buffer) => {
      if (size + d.length > cap) {
        truncated = true;
        if (size < cap) out.push(d.subarray(0, cap - size));
        size = cap;
        child.kill('SIGKILL');
        return;
      }
      size += d.length;
      out.push(d);
    });
    child.stderr!.on('data', (d: Buffer) => { if (err.length < 64) err.push(d); });
    const outer = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 5000);
    child.on('error', (e) => { clearTimeout(outer); reject(e); });
    child.on('close', (code, signal) => {
      clearTimeout(outer);
      resolve({ exitCode: code ?? (signal ? 137 : 1), stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8'), truncated });
    });
    child.stdin!.on('error', () => {});
    child.stdin!.end(o.stdin ?? Buffer.alloc(0));
  });
}

/** A path as given by a client: absolute, no NUL, bounded. */
export function validatePath(p: unknown, field = 'path'): string {
  if (typeof p !== 'string' || p === '') throw new ValidationError(field, 'is required (an absolute path inside the session)', 'invalid_path');
  if (!p.startsWith('/')) throw new ValidationError(field, 'must be an absolute path', 'invalid_path');
  if (p.includes('\0')) throw new ValidationError(field, 'must not contain NUL', 'invalid_path');
  if (Buffer.byteLength(p) > MAX_PATH_LENGTH) throw new ValidationError(field, `must be at most ${MAX_PATH_LENGTH} bytes`, 'invalid_path');
  return p;
}

export function validateMode(m: unknown): string {
  if (m === undefined || m === null || m === '') return '0644';
  if (typeof m !== 'string' || !/^0?[0-7]{3,4}$/.test(m)) throw new ValidationError('mode', 'must be octal like 0644 or 755', 'invalid_request');
  return m;
}

/** Maps the stderr of coreutils/findutils run in C.UTF-8 to a coded error. */
function fileError(path: string, r: RunResult, op: string): DrumsError {
  const e = r.stderr;
  const d = { details: { path, op } };
  if (/No such file or directory|Directory nonexistent/.test(e)) return new DrumsError('file_not_found', `${path}: no such file or directory in the session`, d);
  if (/Permission denied|Operation not permitted/.test(e)) return new DrumsError('file_forbidden', `${path}: permission denied (${op}); use root=1 for root-in-session`, d);
  if (/Read-only file system/.test(e)) return new DrumsError('file_forbidden', `${path}: read-only file system (${op})`, d);
  if (/Is a directory/.test(e)) return new DrumsError('is_a_directory', `${path}: is a directory`, d);
  if (/Not a directory/.test(e)) return new DrumsError('not_a_directory', `${path}: not a directory (or a parent is not)`, d);
  if (/Directory not empty/.test(e)) return new DrumsError('directory_not_empty', `${path}: directory not empty (pass recursive=1)`, d);
  if (/File name too long/.test(e)) return new DrumsError('invalid_path', `${path}: file name too long`, d);
  if (/No space left|Disk quota/.test(e)) return new DrumsError('no_space', `${path}: no space left in the session`, d);
  if (/Too many levels of symbolic links/.test(e)) return new DrumsError('invalid_path', `${path}: too many levels of symbolic links`, d);
  if (r.exitCode === 124 || r.exitCode === 137) return new DrumsError('timeout', `${op} ${path}: timed out in the session`, d);
  return new DrumsError('file_error', `${op} ${path} failed in the session (exit ${r.exitCode}): ${e.trim().slice(0, 500)}`, d);
}

export async function readFile(t: Target, path: string, root: boolean): Promise<Buffer> {
  // Refuse non-regular files (a FIFO or /dev/zero would block or never end).
  const st = await statFile(t, path, root);
  if (st.type === 'directory') throw new DrumsError('is_a_directory', `${path}: is a directory; use /files/list`, { details: { path } });
  if (st.type !== 'file') throw new DrumsError('not_a_regular_file', `${path}: is a ${st.type}, not a regular file`, { details: { path } });
  if (st.size > MAX_READ_BYTES) throw new DrumsError('file_too_large', `${path}: ${st.size} bytes is over the ${MAX_READ_BYTES}-byte read limit`, { details: { path } });
  const r = await runInSession(t, ['/bin/cat', '--', path], { root, maxOutputBytes: MAX_READ_BYTES });
  if (r.truncated) throw new DrumsError('file_too_large', `${path}: over the ${MAX_READ_BYTES}-byte read limit`, { details: { path } });
  if (r.exitCode !== 0) throw fileError(path, r, 'read');
  return r.stdout;
}

// Fixed script; the path and mode arrive as positional parameters and are never parsed as shell code.
const WRITE_SCRIPT = 'set -e; d=$(dirname -- "$1"); mkdir -p -- "$d"; cat > "$1"; chmod -- "$2" "$1"';

export async function writeFile(t: Target, path: string, data: Buffer, mode: string, root: boolean): Promise<void> {
  if (path.endsWith('/')) throw new DrumsError('is_a_directory', `${path}: names a directory`, { details: { path } });
  const r = await runInSession(t, ['/bin/sh', '-c', WRITE_SCRIPT, 'drums-write', path, mode], { root, stdin: data, maxOutputBytes: 4096 });
  if (r.exitCode !== 0) throw fileError(path, r, 'write');
}

export interface FileStat {
  path: string;
  name: string;
  type: 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'unknown';
  size: number;
  mode: string;
  uid: number;
  gid: number;
  mtime: string;
  target?: string;
}

const TYPES: Record<string, FileStat['type']> = { f: 'file', d: 'directory', l: 'symlink', p: 'fifo', s: 'socket', c: 'char', b: 'block' };
// find -printf: type, size, mode, uid, gid, mtime (epoch), symlink target, path; each field ends with a NUL (8 per record).
const FMT = '%y\\0%s\\0%m\\0%U\\0%G\\0%T@\\0%l\\0%p\\0';

function parseFind(out: Buffer): FileStat[] {
  const fields = out.toString('utf8').split('\0');
  const recs: string[][] = [];
  for (let i = 0; i + 8 <= fields.length; i += 8) recs.push(fields.slice(i, i + 8));
  return recs.map((rec) => {
    const [y, s, m, u, g, t, l, p] = rec;
    const path = p ?? '';
    return {
      path,
      name: path === '/' ? '/' : path.replace(/\/+$/, '').split('/').pop() ?? path,
      type: TYPES[y ?? ''] ?? 'unknown',
      size: Number(s),
      mode: (m ?? '').padStart(4, '0'),
      uid: Number(u),
      gid: Number(g),
      mtime: new Date(Number(t) * 1000).toISOString(),
      ...(y === 'l' ? { target: l } : {}),
    };
  });
}

/** lstat-like by default; `follow` stats the target of a symlink. */
export async function statFile(t: Target, path: string, root: boolean, follow = true): Promise<FileStat> {
  const r = await runInSession(t, ['/usr/bin/find', ...(follow ? ['-H'] : ['-P']), path, '-maxdepth', '0', '-printf', FMT], { root, maxOutputBytes: 1 << 16 });
  if (r.exitCode !== 0) throw fileError(path, r, 'stat');
  const [st] = parseFind(r.stdout);
  if (!st) throw fileError(path, r, 'stat');
  st.path = path;
  // find -H falls back to the link itself when its target does not exist: a dangling link.
  if (follow && st.type === 'symlink') throw new DrumsError('file_not_found', `${path}: dangling symbolic link (its target does not exist in the session)`, { details: { path, target: st.target } });
  return st;
}

export const MAX_LIST_ENTRIES = 10_000;

export async function listDir(t: Target, path: string, root: boolean): Promise<{ entries: FileStat[]; truncated: boolean }> {
  const st = await statFile(t, path, root);
  if (st.type !== 'directory') throw new DrumsError('not_a_directory', `${path}: not a directory`, { details: { path } });
  const r = await runInSession(t, ['/usr/bin/find', '-H', path, '-mindepth', '1', '-maxdepth', '1', '-printf', FMT], { root, maxOutputBytes: 8 << 20 });
  if (r.exitCode !== 0 && r.stdout.length === 0) throw fileError(path, r, 'list');
  let entries = parseFind(r.stdout).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const truncated = r.truncated || entries.length > MAX_LIST_ENTRIES;
  if (entries.length > MAX_LIST_ENTRIES) entries = entries.slice(0, MAX_LIST_ENTRIES);
  return { entries, truncated };
}

export async function deleteFile(t: Target, path: string, root: boolean, recursive: boolean): Promise<void> {
  if (/^\/+$/.test(path)) throw new ValidationError('path', 'refusing to delete /', 'invalid_path');
  const st = await statFile(t, path, root, false);
  const argv = st.type === 'directory' ? (recursive ? ['/bin/rm', '-rf', '--one-file-system', '--', path] : ['/bin/rmdir', '--', path]) : ['/bin/rm', '-f', '--', path];
  const r = await runInSession(t, argv, { root, maxOutputBytes: 4096 });
  if (r.exitCode !== 0) throw fileError(path, r, 'delete');
}

/**
 * Exec with streaming output: calls `onData` per chunk as it arrives and
 * resolves with the exit. Same confinement and timeouts as the buffered exec.
 */
export function execStream(t: Target, req: ExecRequest, onData: (stream: 'stdout' | 'stderr', data: string) => void, signal?: AbortSignal): Promise<{ exitCode: number; durationMs: number; timedOut: boolean; truncated: boolean }> {
  const timeoutMs = req.timeoutMs ?? 60_000;
  const cap = req.maxOutputBytes ?? 4 * 1024 * 1024;
  const cmd = req.argv ?? ['/bin/sh', '-c', req.shell!];
  const t0 = performance.now();
  const child = spawnIn(t, cmd, !!req.root, timeoutMs, req.env, req.cwd);
  return new Promise((resolve, reject) => {
    let size = 0;
    let truncated = false;
    const take = (stream: 'stdout' | 'stderr') => (d: Buffer) => {
      if (size >= cap) { truncated = true; return; }
      const part = d.subarray(0, cap - size);
      if (part.length < d.length) truncated = true;
      size += part.length;
      onData(stream, part.toString('utf8'));
    };
    child.stdout!.setEncoding('utf8');
    child.stderr!.setEncoding('utf8');
    child.stdout!.on('data', (s: string) => take('stdout')(Buffer.from(s)));
    child.stderr!.on('data', (s: string) => take('stderr')(Buffer.from(s)));
    let outerTimedOut = false;
    const outer = setTimeout(() => { outerTimedOut = true; child.kill('SIGKILL'); }, timeoutMs + 5000);
    const onAbort = () => child.kill('SIGKILL');
    signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (e) => { clearTimeout(outer); reject(e); });
    child.on('close', (code, sig) => {
      clearTimeout(outer);
      signal?.removeEventListener('abort', onAbort);
      const exitCode = code ?? (sig ? 137 : 1);
      const durationMs = performance.now() - t0;
      resolve({ exitCode, durationMs, timedOut: outerTimedOut || exitCode === 124 || (exitCode === 137 && durationMs >= timeoutMs), truncated });
    });
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.stdin ?? '');
  });
}
