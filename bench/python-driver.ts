import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));
export const PYTHON = join(REPO, '.runtime', 'venv', 'bin', 'python');

/** A driver's PYTHONPATH: that OSWorld checkout's desktop_env first, then the SDK and its benches (sdk/python/bench). */
export function driverPythonPath(checkout?: string): string {
  return [...(checkout ? [checkout] : []), join(REPO, 'sdk', 'python'), join(REPO, 'sdk', 'python', 'bench')].join(':');
}

/**
 * Runs a Python bench driver (`python -m <module> ... --out FILE`, a module of sdk/python/bench: the benches are not
 * in the shipped package) against a private daemon of its own: the SDK and its benches on PYTHONPATH and, with
 * `checkout`, that OSWorld checkout's desktop_env first (as `drums osworld run --osworld-src` does). Each stdout line is progress. Resolves with the driver's JSON (null when it wrote none) and why not.
 */
export async function runPythonDriver(
  module: string,
  args: string[],
  o: { checkout?: string; progress: (m: string) => void },
): Promise<{ result: Record<string, unknown> | null; failure: string | null }> {
  const tmp = mkdtempSync('/var/tmp/drums-bench-driver-');
  const out = join(tmp, 'out.json');
  const d = await startPrivateDaemon();
  try {
    const child = spawn(PYTHON, ['-m', module, ...args, '--out', out], {
      env: {
        ...process.env,
        DRUMS_URL: d.url,
        DRUMS_TOKEN: d.token,
        PYTHONPATH: driverPythonPath(o.checkout),
        ...(o.checkout ? { DRUMS_OSWORLD_SRC: o.checkout } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let tail = '';
    child.stdout!.on('data', (b: Buffer) => {
      for (const line of b.toString().split('\n')) if (line.trim()) o.progress(line);
    });
    child.stderr!.on('data', (b: Buffer) => {
      tail = (tail + b.toString()).slice(-3000);
    });
    const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
    const result = existsSync(out) ? (JSON.parse(readFileSync(out, 'utf8')) as Record<string, unknown>) : null;
    return { result, failure: result ? null : `the driver exited ${code} without a result: ${tail.trim().slice(-1500)}` };
  } finally {
    await d.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
