import { spawn } from 'node:child_process';
import { HostError } from './errors.ts';

export interface RunOptions {
  input?: string | Buffer;
  timeoutMs?: number;
  /** Exit codes that are not failures (default: only 0). */
  okCodes?: number[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

const DEFAULT_TIMEOUT_MS = 60_000;

/** Runs a host command (argv, never a shell) and returns its output; throws HostError on failure. */
export function run(argv: string[], options: RunOptions = {}): Promise<RunResult> {
  const [cmd, ...args] = argv;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'], env: options.env, cwd: options.cwd });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new HostError(argv.join(' '), e.message, { argv }, e));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const stdout = Buffer.concat(out).toString();
      const stderr = Buffer.concat(err).toString();
      const exit = code ?? 128;
      if (signal || !(options.okCodes ?? [0]).includes(exit)) {
        const tail = stderr.trim().split('\n').slice(-5).join('\n') || stdout.trim().split('\n').slice(-3).join('\n');
        const why = signal ? `killed by ${signal}` : `exit ${exit}`;
        reject(new HostError(`${cmd} ${args.slice(0, 3).join(' ')}`, `${why}: ${tail}`, { argv, exitCode: exit, stderrTail: tail }));
        return;
      }
      resolve({ code: exit, stdout, stderr });
    });
    child.stdin.on('error', () => {});
    child.stdin.end(options.input ?? '');
  });
}
