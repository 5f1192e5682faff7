// Observation: screenshot, accessibility tree, terminal text, sizes, cursor, desktop path, platform.

import { terminalText, toOsworldXml } from '../../a11y/index.ts';
import { errorMessage } from '../../common/errors.ts';
import { asGoogleChrome } from '../chrome.ts';
import { HOME, runGuest } from '../guest-exec.ts';
import { ensureReady, type Handler, json, parseForm, text } from '../guest.ts';

export const routeScreenshot: Handler = async (ctx, s) => {
  try {
    ensureReady(s);
    const shot = await ctx.display.screenshot(s, { format: 'png', cursor: true });
    return { status: 200, body: shot.data, type: 'image/png' };
  } catch (e) {
    return json(503, { status: 'error', message: `screenshot failed: ${errorMessage(e)}` });
  }
};

export const routeAccessibility: Handler = async (ctx, s) => {
  ensureReady(s);
  const client = await ctx.display.a11y(s);
  const mirror = await ctx.display.a11yMirror(s);
  const tree = await client.walkTree({ maxDepth: 50, maxWidth: 1024, deadlineMs: 20_000, direct: ctx.display.a11yDirect(s), ...(mirror ? { mirror } : {}) });
  return json(200, { AT: toOsworldXml(asGoogleChrome(tree)) });
};

export const routeTerminal: Handler = async (ctx, s) => {
  ensureReady(s);
  const client = await ctx.display.a11y(s);
  const mirror = await ctx.display.a11yMirror(s);
  const tree = await client.walkTree({ apps: ['gnome-terminal-server'], deadlineMs: 10_000, direct: ctx.display.a11yDirect(s), ...(mirror ? { mirror } : {}) });
  return json(200, { output: terminalText(tree), status: 'success' });
};

export const routeScreenSize: Handler = async (ctx, s) => {
  ensureReady(s);
  const d = await ctx.display.connection(s);
  return json(200, d.screenSize());
};

export const routeWindowSize: Handler = async (ctx, s, req) => {
  const name = (await parseForm(req)).get('app_class_name');
  if (typeof name !== 'string' || !name) return json(400, { error: 'app_class_name is required' });
  ensureReady(s);
  const wins = await (await ctx.display.connection(s)).listWindows();
  const n = name.toLowerCase();
  const w = wins.find((x) => `${x.instance}\0${x.className}`.toLowerCase().includes(n));
  // Upstream returns None here (a 500); a JSON 404 says what happened.
  if (!w) return json(404, { error: `no window whose WM_CLASS contains '${name}'` });
  return json(200, { width: w.width, height: w.height });
};

export const routeCursor: Handler = async (ctx, s) => {
  ensureReady(s);
  const p = await (await ctx.display.connection(s)).cursorPosition();
  return json(200, [p.x, p.y]);
};

export const routeDesktopPath: Handler = async (ctx, s) => {
  ensureReady(s);
  const r = await runGuest(ctx.mgr, s, { argv: ['test', '-d', `${HOME}/Desktop`], timeoutMs: 10_000 });
  if (r.code !== 0) return json(404, { error: 'Desktop directory not found' });
  return json(200, { desktop_path: `${HOME}/Desktop` });
};

export const routePlatform: Handler = async () => text(200, 'Linux');
