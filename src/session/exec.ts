import { ValidationError } from '../common/errors.ts';
import type { OciRuntime } from '../host/oci-runtime.ts';
import { ROOT_CAPS } from '../host/oci-spec.ts';

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
const FIELDS = ['argv', 'shell', 'root', 'cwd', 'env', 'stdin', 'timeoutMs', 'maxOutputBytes'];

export function parseExec(body: unknown): ExecRequest {
  const bad = (f: string, m: string) => new ValidationError(f, m, 'invalid_exec');
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw bad('body', 'must be a JSON object with argv or shell');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (!FIELDS.includes(k)) throw bad(k, `unknown field; allowed: ${FIELDS.join(', ')}`);
  if ((b.argv === undefined) === (b.shell === undefined)) throw bad('argv', 'give exactly one of argv (array of strings) or shell (string)');
  if (b.argv !== undefined) {
    if (!Array.isArray(b.argv) || b.argv.length === 0 || b.argv.length > 4096) throw bad('argv', 'must be a non-empty array of strings');
    b.argv.forEach((a, i) => { if (typeof a !== 'string' || a.includes('\0')) throw bad(`argv[${i}]`, 'must be a string without NUL'); });
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
  return b as ExecRequest;
}

/**
 * Runs a command inside a session through the OCI runtime, so it gets the
 * session's namespaces, cgroup, seccomp filter and no_new_privs. As the
 * desktop user it has no capabilities; as root-in-session only ROOT_CAPS.
 * A non-zero exit is a result. The timeout is enforced inside the session
 * (coreutils `timeout` kills the command), and again from outside.
 */
export function execInSession(runtime: OciRuntime, container: string, baseEnv: Record<string, string>, req: ExecRequest): Promise<ExecResult> {
  const timeoutMs = req.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const cap = req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
  const cmd = req.argv ?? ['/bin/sh', '-c', req.shell!];
  const secs = Math.max(0.001, timeoutMs / 1000).toFixed(3);
  const args = ['/usr/bin/timeout', '--kill-after=2', '--signal=TERM', secs, ...cmd];
  const t0 = performance.now();
  const child = runtime.spawnExec(container, {
    uid: req.root ? 0 : 1000,
    gid: req.root ? 0 : 1000,
    cwd: req.cwd ?? (req.root ? '/root' : '/home/user'),
    env: { ...baseEnv, ...(req.root ? { HOME: '/root', USER: 'root', LOGNAME: 'root' } : {}), ...req.env },
    caps: req.root ? ROOT_CAPS : [],
    args,
  });
  return new Promise((resolve, reject) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let truncated = false;
    const collect = (into: Buffer[]) => (d: Buffer) => {
      if (size >= cap) { truncated = true; return; }
      const take = d.subarray(0, cap - size);
      if (take.length < d.length) truncated = true;
      size += take.length;
      into.push(take);
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(err));
    let outerTimedOut = false;
    const outer = setTimeout(() => { outerTimedOut = true; child.kill('SIGKILL'); }, timeoutMs + 5000);
    child.on('error', (e) => { clearTimeout(outer); reject(e); });
    child.on('close', (code, signal) => {
      clearTimeout(outer);
      const exitCode = code ?? (signal ? 128 + 9 : 1);
      resolve({
        exitCode,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        durationMs: performance.now() - t0,
        // coreutils timeout exits 124 (TERM worked) or 137 (needed KILL).
        timedOut: outerTimedOut || exitCode === 124 || (exitCode === 137 && performance.now() - t0 >= timeoutMs),
        truncated,
      });
    });
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.stdin ?? '');
  });
}
