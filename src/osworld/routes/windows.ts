// Window operations: /setup/open_file, /setup/activate_window, /setup/close_window.

import { basename, posix } from 'node:path';
import { chromiumWindowName } from '../chrome.ts';
import { expandPath } from '../command.ts';
import { HOME, runGuest } from '../guest-exec.ts';
import { ensureReady, type Handler, parseJson, pyTruthy, sleep, text, userEnv } from '../guest.ts';
import { prepare } from '../prepare.ts';

export const routeOpenFile: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.path !== 'string' || !b.path) return text(400, 'Path not supplied!');
  const path = posix.resolve(HOME, expandPath(b.path, userEnv(ctx)));
  ensureReady(s);
  await prepare(ctx, s);
  // A file is opened with xdg-open; otherwise an executable name found with `which` is started.
  const script =
    'if [ -e "$1" ]; then setsid -f xdg-open "$1" >/dev/null 2>&1 </dev/null; exit 0; fi; ' +
    'p=$(command -v "$2" 2>/dev/null) || exit 44; setsid -f "$p" >/dev/null 2>&1 </dev/null';
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', path, b.path], timeoutMs: 15_000 });
  if (r.code === 44) return text(404, `Application/file not found: ${b.path}`);
  if (r.code !== 0) return text(500, `Failed to open ${b.path}. Error: ${r.stderr.trim()}`);
  const base = basename(path);
  const stem = base.includes('.') ? base.slice(0, base.lastIndexOf('.')) : base;
  const timeoutS =
    typeof b.timeout === 'number' && b.timeout > 0 ? Math.min(b.timeout, ctx.mgr.config.osworldOpenTimeoutS) : ctx.mgr.config.osworldOpenTimeoutS;
  const t0 = Date.now();
  while ((Date.now() - t0) / 1000 < timeoutS) {
    if (req.signal.aborted) return text(499, 'client closed the request');
    if (s.state !== 'ready') return text(500, `Failed to open ${b.path}: the session is ${s.state}`);
    const d = await ctx.display.connection(s);
    const wins = await d.listWindows().catch(() => []);
    const w = wins.find((x) => x.title.includes(base) || (stem && x.title.includes(stem)));
    if (w) {
      await d.activateWindow(w.id).catch(() => {});
      return text(200, 'File opened and window activated successfully');
    }
    await sleep(1000, req.signal);
  }
  return text(500, `Failed to find window for ${b.path} within ${timeoutS} seconds.`);
};

export function windowRoute(op: 'a' | 'c', ok: string): Handler {
  return async (ctx, s, req) => {
    const b = parseJson(req);
    if (typeof b.window_name !== 'string' || !b.window_name) return text(400, 'window_name required');
    ensureReady(s);
    const flags = `-${pyTruthy(b.by_class) ? 'x' : ''}${pyTruthy(b.strict) ? 'F' : ''}${op}`;
    // wmctrl's exit code is ignored, as upstream does on Linux. A name that says Google Chrome
    // matches no Chromium window ("… - Chromium"), so when it matched nothing the Chromium spelling is tried.
    const r = await runGuest(ctx.mgr, s, { argv: ['wmctrl', flags, b.window_name], timeoutMs: 15_000 });
    const alt = chromiumWindowName(b.window_name);
    if (r.code !== 0 && alt !== undefined) await runGuest(ctx.mgr, s, { argv: ['wmctrl', flags, alt], timeoutMs: 15_000 });
    return text(200, ok);
  };
}
