/** Running commands inside a session: the one exec-in-session primitive (API exec, files, OSWorld) and the API's exec request. */
import type { ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { ValidationError } from '../common/errors.ts';
import type { OciRuntime } from '../host/oci-runtime.ts';
import { ROOT_CAPS } from '../host/oci-spec.ts';
import { DESKTOP_ENV, ROOT_ENV, identity } from './desktop-user.ts';

export interface ExecRequest {
  /** argv, or `shell` (run by /bin/sh -c). Exactly one of them. */
  argv?: string[];
  shell?: string;
  root?: boolean;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  timeoutMs?: number;
  maxOutputBytes?: number;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

const MAX_TIMEOUT_MS = 3_600_000;
const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024;
/**
 * The most output one exec may ask the daemon to hold (maxOutputBytes). The buffered answer holds it as bytes, as a
 * string and as JSON (up to six times the bytes for control characters), and a streamed one queues it for a slow
 * reader, so this is what one request can cost the daemon. 64 MiB is the files API's read limit too: output that
 * big is a file, and GET /files (or a file written in the session) is the way to move it.
 */
export const MAX_EXEC_OUTPUT_BYTES = 64 * 1024 * 1024;
const FIELDS = ['argv', 'shell', 'root', 'cwd', 'env', 'stdin', 'timeoutMs', 'maxOutputBytes'];

export function parseExec(body: unknown): ExecRequest {
  const bad = (f: string, m: string) => new ValidationError(f, m, 'invalid_exec');
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw bad('body', 'must be a JSON object with argv or shell');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (!FIELDS.includes(k)) throw bad(k, `unknown field; allowed: ${FIELDS.join(', ')}`);
  if ((b.argv === undefined) === (b.shell === undefined)) throw bad('argv', 'give exactly one of argv (array of strings) or shell (string)');
  if (b.argv !== undefined) {
    if (!Array.isArray(b.argv) || b.argv.length === 0 || b.argv.length > 4096) throw bad('argv', 'must be a non-empty array of strings');
    b.argv.forEach((a, i) => {
      if (typeof a !== 'string' || a.includes('\0')) throw bad(`argv[${i}]`, 'must be a string without NUL');
    });
  }
  if (b.shell !== undefined && (typeof b.shell !== 'string' || !b.shell || b.shell.length > 1_000_000)) throw bad('shell', 'must be a non-empty string');
  if (b.root !== undefined && typeof b.root !== 'boolean') throw bad('root', 'must be a boolean');
  if (b.cwd !== undefined && (typeof b.cwd !== 'string' || !b.cwd.startsWith('/'))) throw bad('cwd', 'must be an absolute path');
  if (b.env !== undefined) {
    if (!b.env || typeof b.env !== 'object' || Array.isArray(b.env)) throw bad('env', 'must be an object of strings');
    for (const [k, v] of Object.entries(b.env)) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw bad(`env.${k}`, 'invalid variable name');
      if (typeof v !== 'string' || v.includes('\0')) throw bad(`env.${k}`, 'must be a string without NUL');
    }
  }
  if (b.stdin !== undefined && typeof b.stdin !== 'string') throw bad('stdin', 'must be a string');
  for (const f of ['timeoutMs', 'maxOutputBytes'] as const) {
    if (b[f] !== undefined && (typeof b[f] !== 'number' || !Number.isInteger(b[f]) || (b[f] as number) < 1)) throw bad(f, 'must be a positive integer');
  }
  if ((b.timeoutMs as number) > MAX_TIMEOUT_MS) throw bad('timeoutMs', `must be at most ${MAX_TIMEOUT_MS}`);
  if ((b.maxOutputBytes as number) > MAX_EXEC_OUTPUT_BYTES) {
    throw bad('maxOutputBytes', `must be at most ${MAX_EXEC_OUTPUT_BYTES} (64 MiB); write larger output to a file in the session and read it with GET /files`);
  }
  return b as ExecRequest;
}

/** Where a command runs: a session's container, through the OCI runtime. */
export interface Target {
  runtime: OciRuntime;
  container: string;
  /** The base environment; default the desktop environment (DESKTOP_ENV). */
  env?: Readonly<Record<string, string>>;
}

export interface SpawnOptions {
  argv: string[];
  /** Root-in-session (ROOT_CAPS only, still confined) instead of the desktop user. */
  root?: boolean;
  /** Default: the user's home (/home/user, or /root for root). */
  cwd?: string;
  /** Merged over the target's environment (after root's HOME/USER/LOGNAME). */
  env?: Record<string, string>;
  /** Wraps argv in coreutils `timeout` inside the session (TERM, then KILL 2 s later). */
  timeoutMs?: number;
  /** stderr into stdout in the order written: one pipe inside the session, like Popen's stderr=STDOUT. */
  mergeStderr?: boolean;
}

export interface RunOptions extends SpawnOptions {
  timeoutMs: number;
  stdin?: Buffer | string;
  /**
   * Instead of `stdin`: the caller writes the command's stdin itself (streaming, with backpressure through
   * write()'s result and 'drain') and ends it. Write errors (the command has exited) are swallowed here.
   */
  feed?: (stdin: Writable) => void;
  /** Cap on stdout plus stderr; what is over it is dropped (truncated: true). */
  maxOutputBytes?: number;
  /**
   * Stop the command once it writes past the cap (a file read that cannot fit), rather than draining it: its
   * output pipes are closed (its next write gets SIGPIPE or EPIPE) and it is TERMed through the in-session
   * `timeout` (KILLed after the grace), so the daemon reads nothing more of it. The output read so far is dropped
   * (the result's stdout and stderr are empty, `truncated` true).
   */
  killOnOverflow?: boolean;
  /**
   * Aborts the command: SIGTERM to the runtime's exec process, which forwards it to the in-session
   * `timeout`, which signals the command's process group (and KILLs it 2 s later); SIGKILL to the
   * exec process if it is still there after that. The result then comes as usual.
   */
  signal?: AbortSignal;
  /**
   * Streams output as it arrives instead of buffering it (the result's stdout and stderr are then empty). A
   * `false` return pauses reading the command's output (it then blocks on its pipes) until the function handed to
   * `resumeWith` is called: backpressure from a slow reader to the command.
   */
  onData?: (stream: 'stdout' | 'stderr', data: Buffer) => boolean | void;
  resumeWith?: (resume: () => void) => void;
}

export interface RunResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

/** The exit code reported for a command killed by a signal: 128 + SIGKILL, what coreutils timeout and a shell report. */
export const KILLED_EXIT = 128 + 9;
/** The outer timer: the in-session `timeout` gets this long (beyond its own 2 s KILL) before the host kills the exec. */
const OUTER_GRACE_MS = 5000;
/** After an abort's TERM: the in-session `timeout` KILLs at 2 s; the host KILLs the exec process at this. */
const ABORT_GRACE_MS = 4000;

/**
 * Spawns argv in a session through the OCI runtime, so it gets the session's
 * namespaces, cgroup, seccomp filter and no_new_privs. As the desktop user it
 * has no capabilities; as root-in-session only ROOT_CAPS. The caller owns the
 * process (runInSession is the bounded form).
 */
export function spawnInSession(t: Target, o: SpawnOptions): ChildProcess {
  const root = o.root === true;
  const who = identity(root);
  let argv = o.mergeStderr ? ['/bin/sh', '-c', 'exec "$@" 2>&1', 'sh', ...o.argv] : o.argv;
  if (o.timeoutMs !== undefined) argv = ['/usr/bin/timeout', '--kill-after=2', '--signal=TERM', Math.max(0.001, o.timeoutMs / 1000).toFixed(3), ...argv];
  return t.runtime.spawnExec(t.container, {
    uid: who.uid,
    gid: who.gid,
    cwd: o.cwd ?? who.home,
    env: { ...(t.env ?? DESKTOP_ENV), ...(root ? ROOT_ENV : {}), ...o.env },
    caps: root ? ROOT_CAPS : [],
    args: argv,
  });
}

/**
 * Runs a command in a session to its end, with the timeout enforced inside
 * the session (coreutils `timeout` kills the command) and again from outside,
 * and output capped. A non-zero exit is a result, not an error.
 */
export function runInSession(t: Target, o: RunOptions): Promise<RunResult> {
  const cap = o.maxOutputBytes ?? Number.POSITIVE_INFINITY;
  const t0 = performance.now();
  const child = spawnInSession(t, o);
  return new Promise((resolve, reject) => {
    // Note: a SIGKILL to the runtime's exec process cannot be forwarded, and would leave the
    // command running in the session; a TERM is forwarded (runc and crun proxy signals).
    let escalate: NodeJS.Timeout | undefined;
    const onAbort = () => {
      if (escalate) return;
      child.kill('SIGTERM');
      escalate = setTimeout(() => child.kill('SIGKILL'), ABORT_GRACE_MS);
    };
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let truncated = false;
    let stopped = false;
    const overflow = () => {
      if (truncated) return;
      truncated = true;
      if (!o.killOnOverflow) return;
      stopped = true;
      // Nothing of a cut-short answer is used (the caller answers an error): drop what was read at once.
      out.length = 0;
      err.length = 0;
      // A SIGKILL to the runtime's exec process would leave the command running (see onAbort): close our ends of
      // its pipes, so nothing more is read, and TERM it through the in-session `timeout`.
      // TERM first: closed first, the TERM did not reach the command (likely the runtime died of SIGPIPE before forwarding).
      onAbort();
      child.stdout!.destroy();
      child.stderr!.destroy();
    };
    const collect = (stream: 'stdout' | 'stderr', into: Buffer[]) => (d: Buffer) => {
      if (size >= cap) {
        overflow();
        return;
      }
      const take = d.subarray(0, cap - size);
      size += take.length;
      if (!o.onData) into.push(take);
      else if (o.onData(stream, take) === false) {
        child.stdout!.pause();
        child.stderr!.pause();
      }
      if (take.length < d.length) overflow();
    };
    child.stdout!.on('data', collect('stdout', out));
    child.stderr!.on('data', collect('stderr', err));
    o.resumeWith?.(() => {
      child.stdout!.resume();
      child.stderr!.resume();
    });
    let outerTimedOut = false;
    const outer = setTimeout(() => {
      outerTimedOut = true;
      child.kill('SIGKILL');
    }, o.timeoutMs + OUTER_GRACE_MS);
    if (o.signal?.aborted) onAbort();
    else o.signal?.addEventListener('abort', onAbort, { once: true });
    const done = () => {
      clearTimeout(outer);
      clearTimeout(escalate);
      o.signal?.removeEventListener('abort', onAbort);
    };
    child.on('error', (e) => {
      done();
      reject(e);
    });
    child.on('close', (code, signal) => {
      done();
      const exitCode = code ?? (signal ? KILLED_EXIT : 1);
      const durationMs = performance.now() - t0;
      resolve({
        exitCode,
        stdout: Buffer.concat(out),
        stderr: Buffer.concat(err),
        durationMs,
        // coreutils timeout exits 124 (TERM worked) or 137 (needed KILL); a command stopped at the cap did not time out.
        timedOut: outerTimedOut || (!stopped && (exitCode === 124 || (exitCode === KILLED_EXIT && durationMs >= o.timeoutMs))),
        truncated,
      });
    });
    child.stdin!.on('error', () => {});
    if (o.feed) o.feed(child.stdin!);
    else child.stdin!.end(o.stdin ?? '');
  });
}

function execOptions(req: ExecRequest): RunOptions {
  return {
    argv: req.argv ?? ['/bin/sh', '-c', req.shell!],
    root: req.root,
    cwd: req.cwd,
    env: req.env,
    stdin: req.stdin,
    timeoutMs: req.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxOutputBytes: req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT,
  };
}

/**
 * POST /v1/sessions/{id}/exec, buffered: the answer's JSON (an ExecResult with `extra`'s fields), as the parts of
 * its UTF-8 body. The output is decoded and JSON-escaped as it arrives, so the daemon holds it once, as the body
 * (bytes, a string, its JSON and an encoded copy would be five times maxOutputBytes at the answer's peak).
 */
export async function execInSession(t: Target, req: ExecRequest, signal: AbortSignal | undefined, extra: Record<string, unknown>): Promise<Buffer[]> {
  const parts = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const dec = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  const add = (stream: 'stdout' | 'stderr', s: string) => {
    if (s) parts[stream].push(Buffer.from(JSON.stringify(s).slice(1, -1)));
  };
  const r = await runInSession(t, { ...execOptions(req), signal, onData: (stream, d) => add(stream, dec[stream].write(d)) });
  add('stdout', dec.stdout.end());
  add('stderr', dec.stderr.end());
  const head = JSON.stringify({
    exitCode: r.exitCode,
    durationMs: Math.round(r.durationMs * 10) / 10,
    timedOut: r.timedOut,
    truncated: r.truncated,
    ...extra,
  });
  return [Buffer.from(`${head.slice(0, -1)},"stdout":"`), ...parts.stdout, Buffer.from('","stderr":"'), ...parts.stderr, Buffer.from('"}')];
}

/**
 * POST /v1/sessions/{id}/exec?stream=1: calls `onData` per chunk as it
 * arrives (whole UTF-8 characters) and resolves with the exit. Same
 * confinement, timeouts and cap as the buffered exec. `onData` returning
 * false pauses the command's output until `resumeWith`'s function is called.
 */
export async function execStream(
  t: Target,
  req: ExecRequest,
  onData: (stream: 'stdout' | 'stderr', data: string) => boolean | void,
  signal?: AbortSignal,
  resumeWith?: (resume: () => void) => void,
): Promise<Omit<ExecResult, 'stdout' | 'stderr'>> {
  const dec = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  const r = await runInSession(t, {
    ...execOptions(req),
    signal,
    resumeWith,
    onData: (stream, d) => {
      const s = dec[stream].write(d);
      return s ? onData(stream, s) : undefined;
    },
  });
  for (const stream of ['stdout', 'stderr'] as const) {
    const s = dec[stream].end();
    if (s) onData(stream, s);
  }
  return { exitCode: r.exitCode, durationMs: r.durationMs, timedOut: r.timedOut, truncated: r.truncated };
}
