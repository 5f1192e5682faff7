// /execute, /execute_with_verification (and their /setup twins) and /setup/launch.

import { errorMessage } from '../../common/errors.ts';
import type { Session } from '../../session/manager.ts';
import { normalizeCommand, pyRepr, type Normalized } from '../command.ts';
import { GUEST_OUTPUT_BYTES, overflowMessage, runGuest } from '../guest-exec.ts';
import { ensureReady, type GuestContext, type Handler, json, parseJson, pyTruthy, type Req, sleep, text } from '../guest.ts';
import { prepare } from '../prepare.ts';

const EXECUTE_TIMEOUT_S = 120;

/**
 * Whether a command runs as root-in-session: only on the harness's set-up routes (`/setup/execute`,
 * `/setup/execute_with_verification`, `/setup/launch`: what SetupController posts for a task's config and
 * postconfig, from the task file) and only when its argv really invokes sudo (`invokesSudo`). `/execute` and
 * `/execute_with_verification` carry the agent's actions (PythonController.execute_python_command for every
 * `env.step`) and the evaluator's getters: they always run as the desktop user, whatever their text says.
 */
function elevated(req: Req, norm: Normalized): boolean {
  return norm.sudo && req.path.startsWith('/setup/');
}

async function execute(ctx: GuestContext, s: Session, b: Record<string, unknown>, signal: AbortSignal, root: (n: Normalized) => boolean) {
  const timeoutS = typeof b.timeout === 'number' && b.timeout > 0 ? b.timeout : EXECUTE_TIMEOUT_S;
  let norm: Normalized;
  try {
    norm = normalizeCommand(b.command, b.shell);
  } catch (e) {
    return { error: errorMessage(e) };
  }
  ensureReady(s);
  await prepare(ctx, s);
  const r = await runGuest(ctx.mgr, s, { argv: norm.argv, root: root(norm), timeoutMs: timeoutS * 1000, signal });
  // Over the output budget: the error OSWorld's server gives for any exception (a MemoryError there), not a cut result.
  if (r.overflow) return { error: overflowMessage(GUEST_OUTPUT_BYTES) };
  if (r.timedOut) return { error: `Command ${pyRepr(b.command)} timed out after ${timeoutS} seconds` };
  // subprocess raises FileNotFoundError for a missing program; coreutils timeout says so with 127.
  if (r.code === 127 && /^\/usr\/bin\/timeout: failed to run command/m.test(r.stderr)) {
    return { error: `[Errno 2] No such file or directory: ${pyRepr(norm.argv[0])}` };
  }
  return { result: { status: 'success', output: r.stdout.toString('utf8'), error: r.stderr, returncode: r.code } };
}

export const routeExecute: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  const r = await execute(ctx, s, b, req.signal, (n) => elevated(req, n));
  if ('error' in r) return json(500, { status: 'error', message: r.error });
  return json(200, r.result);
};

export const routeExecuteVerify: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  const verification = (b.verification && typeof b.verification === 'object' ? b.verification : {}) as Record<string, unknown>;
  const maxWait = typeof b.max_wait_time === 'number' ? b.max_wait_time : 10;
  const interval = typeof b.check_interval === 'number' ? b.check_interval : 1;
  const r = await execute(ctx, s, b, req.signal, (n) => elevated(req, n));
  if ('error' in r) return json(500, { status: 'error', message: r.error });
  if (!verification.window_exists && !verification.command_success) return json(200, r.result);
  const t0 = Date.now();
  while ((Date.now() - t0) / 1000 < maxWait && !req.signal.aborted) {
    let ok = true;
    if (typeof verification.window_exists === 'string') {
      const name = verification.window_exists.toLowerCase();
      const wins = await (await ctx.display.connection(s)).listWindows().catch(() => []);
      ok &&= wins.some((w) => w.title.toLowerCase().includes(name));
    }
    if (ok && typeof verification.command_success === 'string') {
      const c = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', verification.command_success], timeoutMs: 10_000 });
      ok &&= c.code === 0;
    }
    if (ok) return json(200, { ...r.result, verification: 'passed', wait_time: (Date.now() - t0) / 1000 });
    await sleep(interval * 1000, req.signal);
  }
  return json(500, { ...r.result, status: 'verification_failed', verification: 'failed', wait_time: maxWait });
};

export const routeLaunch: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  let norm: Normalized;
  try {
    norm = normalizeCommand(b.command, b.shell);
  } catch (e) {
    return json(500, { status: 'error', message: errorMessage(e) });
  }
  ensureReady(s);
  await prepare(ctx, s);
  // Detached: setsid -f forks and returns; the program's stdio is /dev/null. A missing program is an error (Popen raises).
  const script =
    'command -v "$1" >/dev/null 2>&1 || { echo "[Errno 2] No such file or directory: \'$1\'" >&2; exit 127; }; setsid -f "$@" >/dev/null 2>&1 </dev/null';
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', ...norm.argv], root: elevated(req, norm), timeoutMs: 15_000 });
  if (r.code !== 0) return json(500, { status: 'error', message: r.stderr.trim() || `launch failed with code ${r.code}` });
  const shown = pyTruthy(b.shell) || typeof b.command === 'string' ? String(b.command) : (b.command as string[]).join(' ');
  return text(200, `${shown} launched successfully`);
};
