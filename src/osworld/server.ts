// OSWorld's guest server contract (docs/osworld.md), served for one session by
// the host daemon: a plain node:http listener on 127.0.0.1:<free port>. Every
// guest-side action runs inside the session through the runtime (guest-exec.ts);
// screenshots, the cursor and windows come from the daemon's X connection and
// the accessibility tree from its AT-SPI client. Nothing here may throw out of
// a handler: every failure becomes the route's own error shape.

import { randomUUID } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { basename, extname, posix } from 'node:path';
import { terminalText, toOsworldXml } from '../a11y/index.ts';
import type { DisplayService } from '../session/display-service.ts';
import { errorMessage } from '../common/errors.ts';
import { log } from '../common/log.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import { asGoogleChrome, chromiumWindowName } from './chrome.ts';
import { expandPath, normalizeCommand, pyRepr, type Normalized } from './command.ts';
import { DESKTOP_GID, DESKTOP_UID } from '../session/desktop-user.ts';
import { HOME, runGuest, spawnGuest } from './guest-exec.ts';

const EXECUTE_TIMEOUT_S = 120;
const RECORDING = '/tmp/recording.mp4';

export interface GuestContext {
  mgr: SessionManager;
  display: DisplayService;
  /** The session, or undefined once it is gone. */
  session(): Session | undefined;
}

class HttpError extends Error {
  status: number;
  body: unknown;
  constructor(status: number, body: unknown) {
    super(typeof body === 'string' ? body : JSON.stringify(body));
    this.status = status;
    this.body = body;
  }
}

interface Req {
  raw: IncomingMessage;
  body: Buffer;
  /** Aborted when the client goes away before the response. */
  signal: AbortSignal;
}

type Reply = { status: number; body: unknown; type?: string; headers?: Record<string, string> };
type Handler = (ctx: GuestContext, s: Session, req: Req, rec: RecordingState) => Promise<Reply>;

const json = (status: number, body: unknown): Reply => ({ status, body, type: 'application/json' });
const text = (status: number, body: string): Reply => ({ status, body, type: 'text/html; charset=utf-8' });

function flaskPage(status: number, title: string, description: string): Reply {
  return text(status, `<!doctype html>\n<html lang=en>\n<title>${status} ${title}</title>\n<h1>${title}</h1>\n<p>${description}</p>\n`);
}

function parseJson(req: Req): Record<string, unknown> {
  const t = req.body.toString('utf8');
  if (!t.trim()) return {};
  try {
    const v = JSON.parse(t);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    /* below */
  }
  // Flask's request.json on a malformed body: 400 Bad Request page.
  throw new HttpError(400, 'Failed to decode JSON object');
}

async function parseForm(req: Req): Promise<FormData> {
  const ct = req.raw.headers['content-type'] ?? '';
  if (!/multipart\/form-data|application\/x-www-form-urlencoded/i.test(ct)) return new FormData();
  try {
    return await new Request('http://guest/', { method: 'POST', headers: { 'content-type': ct }, body: new Uint8Array(req.body) }).formData();
  } catch {
    return new FormData();
  }
}

function ensureReady(s: Session): void {
  if (s.state !== 'ready') throw new Error(`session ${s.id} is ${s.state}${s.brokenReason ? `: ${s.brokenReason}` : ''}`);
}

/** The desktop user's environment for ~ and $VAR expansion. */
function userEnv(ctx: GuestContext): Record<string, string> {
  return ctx.mgr.sessionEnv();
}

const prepared = new Map<string, number>();
const RUN_USER = `/run/user/${DESKTOP_UID}`;
const OWNER = `${DESKTOP_UID}:${DESKTOP_GID}`;
/** Once per generation: /run/user/1000/bus (what OSWorld tasks hard-code) points at the session bus. */
async function prepare(ctx: GuestContext, s: Session): Promise<void> {
  if (prepared.get(s.id) === s.generation) return;
  const r = await runGuest(ctx.mgr, s, {
    argv: [
      '/bin/sh',
      '-c',
      `mkdir -p ${RUN_USER} && ln -sfn /run/drums/bus ${RUN_USER}/bus && chown -h ${OWNER} ${RUN_USER} ${RUN_USER}/bus && chmod 700 ${RUN_USER}` +
        // python-xlib (pyautogui) insists on an ~/.Xauthority file, even an empty one.
        ` && { [ -e ${HOME}/.Xauthority ] || install -o ${DESKTOP_UID} -g ${DESKTOP_GID} -m 600 /dev/null ${HOME}/.Xauthority; }`,
    ],
    root: true,
    timeoutMs: 10_000,
  });
  if (r.code !== 0) log('warn', 'osworld prepare failed', { id: s.id, stderr: r.stderr });
  // A real entry, or python-xlib prints 'no xauthority details' warnings into every pyautogui command's stdout.
  const x = await runGuest(ctx.mgr, s, {
    argv: ['xauth', '-q', '-f', `${HOME}/.Xauthority`, 'add', ':0', 'MIT-MAGIC-COOKIE-1', randomUUID().replace(/-/g, '')],
    timeoutMs: 10_000,
  });
  if (x.code !== 0) log('warn', 'osworld xauth failed', { id: s.id, stderr: x.stderr });
  prepared.set(s.id, s.generation);
}

export function forgetSession(id: string): void {
  prepared.delete(id);
}

// ------------------------------------------------------------------ execute

async function execute(ctx: GuestContext, s: Session, b: Record<string, unknown>, signal: AbortSignal) {
  const timeoutS = typeof b.timeout === 'number' && b.timeout > 0 ? b.timeout : EXECUTE_TIMEOUT_S;
  let norm: Normalized;
  try {
    norm = normalizeCommand(b.command, b.shell);
  } catch (e) {
    return { error: errorMessage(e) };
  }
  ensureReady(s);
  await prepare(ctx, s);
  const r = await runGuest(ctx.mgr, s, { argv: norm.argv, root: norm.sudo, timeoutMs: timeoutS * 1000, signal, maxOutputBytes: 64 * 1024 * 1024 });
  if (r.timedOut) return { error: `Command ${pyRepr(b.command)} timed out after ${timeoutS} seconds` };
  // subprocess raises FileNotFoundError for a missing program; coreutils timeout says so with 127.
  if (r.code === 127 && /^\/usr\/bin\/timeout: failed to run command/m.test(r.stderr)) {
    return { error: `[Errno 2] No such file or directory: ${pyRepr(norm.argv[0])}` };
  }
  return { result: { status: 'success', output: r.stdout.toString('utf8'), error: r.stderr, returncode: r.code } };
}

const routeExecute: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  const r = await execute(ctx, s, b, req.signal);
  if ('error' in r) return json(500, { status: 'error', message: r.error });
  return json(200, r.result);
};

const routeExecuteVerify: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  const verification = (b.verification && typeof b.verification === 'object' ? b.verification : {}) as Record<string, unknown>;
  const maxWait = typeof b.max_wait_time === 'number' ? b.max_wait_time : 10;
  const interval = typeof b.check_interval === 'number' ? b.check_interval : 1;
  const r = await execute(ctx, s, b, req.signal);
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

const routeLaunch: Handler = async (ctx, s, req) => {
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
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', ...norm.argv], root: norm.sudo, timeoutMs: 15_000 });
  if (r.code !== 0) return json(500, { status: 'error', message: r.stderr.trim() || `launch failed with code ${r.code}` });
  const shown = pyTruthy(b.shell) || typeof b.command === 'string' ? String(b.command) : (b.command as string[]).join(' ');
  return text(200, `${shown} launched successfully`);
};

function pyTruthy(v: unknown): boolean {
  return !(v === undefined || v === null || v === false || v === 0 || v === '' || (Array.isArray(v) && v.length === 0));
}

// ------------------------------------------------------------------ observation

const routeScreenshot: Handler = async (ctx, s) => {
  try {
    ensureReady(s);
    const shot = await ctx.display.screenshot(s, { format: 'png', cursor: true });
    return { status: 200, body: shot.data, type: 'image/png' };
  } catch (e) {
    return json(503, { status: 'error', message: `screenshot failed: ${errorMessage(e)}` });
  }
};

const routeAccessibility: Handler = async (ctx, s) => {
  ensureReady(s);
  const client = await ctx.display.a11y(s);
  const tree = await client.walkTree({ maxDepth: 50, maxWidth: 1024, deadlineMs: 20_000 });
  return json(200, { AT: toOsworldXml(asGoogleChrome(tree)) });
};

const routeTerminal: Handler = async (ctx, s) => {
  ensureReady(s);
  const client = await ctx.display.a11y(s);
  const tree = await client.walkTree({ apps: ['gnome-terminal-server'], deadlineMs: 10_000 });
  return json(200, { output: terminalText(tree), status: 'success' });
};

const routeScreenSize: Handler = async (ctx, s) => {
  ensureReady(s);
  const d = await ctx.display.connection(s);
  return json(200, d.screenSize());
};

const routeWindowSize: Handler = async (ctx, s, req) => {
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

const routeCursor: Handler = async (ctx, s) => {
  ensureReady(s);
  const p = await (await ctx.display.connection(s)).cursorPosition();
  return json(200, [p.x, p.y]);
};

const routeDesktopPath: Handler = async (ctx, s) => {
  ensureReady(s);
  const r = await runGuest(ctx.mgr, s, { argv: ['test', '-d', `${HOME}/Desktop`], timeoutMs: 10_000 });
  if (r.code !== 0) return json(404, { error: 'Desktop directory not found' });
  return json(200, { desktop_path: `${HOME}/Desktop` });
};

const routePlatform: Handler = async () => text(200, 'Linux');

// ------------------------------------------------------------------ files

const MIME: Record<string, string> = {
  '.txt': 'text/plain',
  '.json': 'application/json',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.svg': 'image/svg+xml',
  '.pdf': 'application/pdf',
  '.html': 'text/html',
  '.csv': 'text/csv',
  '.xml': 'application/xml',
  '.mp4': 'video/mp4',
  '.mp3': 'audio/mpeg',
  '.zip': 'application/zip',
  '.sh': 'application/x-sh',
  '.py': 'text/x-python',
  '.docx': 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  '.xlsx': 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  '.pptx': 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
};

function attachment(data: Buffer, path: string, type?: string): Reply {
  const name = basename(path).replace(/["\\\r\n]/g, '_');
  return {
    status: 200,
    body: data,
    type: type ?? MIME[extname(path).toLowerCase()] ?? 'application/octet-stream',
    headers: { 'content-disposition': `attachment; filename="${name}"` },
  };
}

/**
 * A path from the client that cannot name a file (a NUL byte, over PATH_MAX): 400 at once, as
 * the guest would fail on it. Every other path is resolved INSIDE the session (its own mount
 * namespace and root), so `..`, symlinks and /proc/self/root never reach the host.
 */
function badGuestPath(p: string): string | undefined {
  if (p.includes('\0')) return 'the path contains a NUL byte';
  if (Buffer.byteLength(p) > 4096) return 'the path is longer than 4096 bytes';
  return undefined;
}
/**
 * Failures the client's path caused are 4xx, not the upstream server's blanket 500: refused
 * (403), a path that cannot take the operation (a directory, a socket, a loop of links,
 * too long, read-only: 400). A full session disk is 507. Anything else stays 500.
 */
function guestFailure(stderr: string): number | undefined {
  if (/Permission denied|Operation not permitted/.test(stderr)) return 403;
  if (
    /Is a directory|Not a directory|No such device or address|File name too long|Too many levels of symbolic links|Read-only file system|Invalid argument|No such file or directory|Text file busy|File exists/.test(
      stderr,
    )
  )
    return 400;
  if (/No space left on device|Disk quota exceeded/.test(stderr)) return 507;
  return undefined;
}

/** Reads a regular file inside the session as the desktop user: exit 44 = missing. */
async function readGuestFile(ctx: GuestContext, s: Session, path: string) {
  return runGuest(ctx.mgr, s, {
    argv: ['/bin/sh', '-c', '[ -f "$1" ] || exit 44; exec cat -- "$1"', 'sh', path],
    timeoutMs: 120_000,
    maxOutputBytes: ctx.mgr.config.osworldMaxBodyBytes,
  });
}

const routeFile: Handler = async (ctx, s, req) => {
  const p = (await parseForm(req)).get('file_path');
  if (typeof p !== 'string' || !p) return json(400, { error: 'file_path is required' });
  const bad = badGuestPath(p);
  if (bad) return json(400, { error: `file_path: ${bad}` });
  const path = posix.resolve(HOME, expandPath(p, userEnv(ctx)));
  try {
    ensureReady(s);
    const r = await readGuestFile(ctx, s, path);
    if (r.code === 44) return json(404, { error: 'File not found' });
    if (r.code !== 0 && guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: `Failed to serve file: ${r.stderr.trim()}` });
    if (r.code !== 0) return json(500, { error: `Failed to serve file: ${r.stderr.trim() || `exit ${r.code}`}` });
    return attachment(r.stdout, path);
  } catch (e) {
    return json(500, { error: `Failed to serve file: ${errorMessage(e)}` });
  }
};

const routeUpload: Handler = async (ctx, s, req) => {
  const form = await parseForm(req);
  const p = form.get('file_path');
  const f = form.get('file_data');
  if (typeof p !== 'string' || !p || !(f instanceof Blob)) return json(400, { error: 'file_path and file_data are required' });
  const bad = badGuestPath(p);
  if (bad) return json(400, { error: `file_path: ${bad}` });
  const path = posix.resolve(HOME, expandPath(p, userEnv(ctx)));
  try {
    ensureReady(s);
    const data = Buffer.from(await f.arrayBuffer());
    // As the desktop user: parents created; a partial file is removed on failure.
    const script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" || { rc=$?; rm -f -- "$1"; exit $rc; }';
    const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', path], stdin: data, timeoutMs: 600_000 });
    if (r.code !== 0 && guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: `Failed to upload file: ${r.stderr.trim()}` });
    if (r.code !== 0) return json(500, { error: `Failed to upload file: ${r.stderr.trim() || `exit ${r.code}`}` });
    return text(200, `File Uploaded: ${data.length} bytes`);
  } catch (e) {
    return json(500, { error: `Failed to upload file: ${errorMessage(e)}` });
  }
};

const LIST_DIR_PY = `
import json, os, sys
def tree(p):
    node = {"type": "directory", "name": os.path.basename(p), "children": []}
    try:
        for e in os.listdir(p):
            full = os.path.join(p, e)
            if os.path.isdir(full):
                node["children"].append(tree(full))
            else:
                node["children"].append({"type": "file", "name": e})
    except Exception as ex:
        return {"error": str(ex)}
    return node
p = sys.argv[1]
if not os.path.isdir(p):
    sys.exit(3)
sys.stdout.write(json.dumps(tree(p)))
`;

const routeListDirectory: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.path !== 'string' || !b.path) return json(400, { error: "Missing 'path' parameter" });
  const bad = badGuestPath(b.path);
  if (bad) return json(400, { error: `path: ${bad}` });
  const path = posix.resolve(HOME, expandPath(b.path, userEnv(ctx)));
  ensureReady(s);
  const r = await runGuest(ctx.mgr, s, { argv: ['python3', '-c', LIST_DIR_PY, path], timeoutMs: 60_000 });
  if (r.code === 3) return json(400, { error: 'The provided path is not a directory' });
  if (r.code !== 0 && guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: r.stderr.trim() });
  if (r.code !== 0) return json(500, { error: r.stderr.trim() || `exit ${r.code}` });
  return json(200, { directory_tree: JSON.parse(r.stdout.toString('utf8')) });
};

const routeWallpaper: Handler = async (ctx, s) => {
  ensureReady(s);
  const g = await runGuest(ctx.mgr, s, { argv: ['gsettings', 'get', 'org.gnome.desktop.background', 'picture-uri'], timeoutMs: 10_000 });
  if (g.code !== 0) return flaskPage(500, 'Internal Server Error', 'Could not read the wallpaper setting.');
  const path = g.stdout
    .toString('utf8')
    .trim()
    .replace(/^'|'$/g, '')
    .replace(/^file:\/\//, '');
  if (!path) return flaskPage(404, 'Not Found', 'Wallpaper file not found.');
  const r = await readGuestFile(ctx, s, path);
  if (r.code === 44) return flaskPage(404, 'Not Found', 'Wallpaper file not found.');
  if (r.code !== 0) return flaskPage(500, 'Internal Server Error', 'Failed to read the wallpaper.');
  return { status: 200, body: r.stdout, type: 'image/png' };
};

const routeChangeWallpaper: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.path !== 'string' || !b.path) return text(400, 'Path not supplied!');
  const path = posix.resolve(HOME, expandPath(b.path, userEnv(ctx)));
  ensureReady(s);
  await prepare(ctx, s);
  const r = await runGuest(ctx.mgr, s, {
    argv: ['/bin/sh', '-c', '[ -e "$1" ] || exit 44; gsettings set org.gnome.desktop.background picture-uri "file://$1"; exit 0', 'sh', path],
    timeoutMs: 15_000,
  });
  if (r.code === 44) return text(404, `File not found: ${path}`);
  return text(200, 'Wallpaper changed successfully');
};

const routeDownloadFile: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.url !== 'string' || !b.url || typeof b.path !== 'string' || !b.path) return text(400, 'Path or URL not supplied!');
  const path = posix.resolve(HOME, expandPath(b.path, userEnv(ctx)));
  ensureReady(s);
  // The guest downloads (curl inside the session's network namespace, so the session's egress policy applies).
  const script = 'mkdir -p -- "$(dirname -- "$2")" && curl -fsSL --retry 2 --connect-timeout 10 --max-time 300 -o "$2" -- "$1" && wc -c < "$2"';
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', b.url, path], timeoutMs: 960_000, signal: req.signal });
  if (r.code !== 0) return text(500, `Failed to download ${b.url}. No retries left. Error: ${r.stderr.trim() || `exit ${r.code}`}`);
  return text(200, `File downloaded successfully: ${r.stdout.toString().trim()} bytes`);
};

// ------------------------------------------------------------------ windows

const routeOpenFile: Handler = async (ctx, s, req) => {
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

function windowRoute(op: 'a' | 'c', ok: string): Handler {
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

// ------------------------------------------------------------------ recording

export interface RecordingState {
  child?: ChildProcess;
  generation?: number;
  stderr?: string;
}

const routeStartRecording: Handler = async (ctx, s, _req, rec) => {
  if (rec.child && rec.child.exitCode === null && rec.child.signalCode === null && rec.generation === s.generation) {
    return json(400, { status: 'error', message: 'Recording is already in progress.' });
  }
  ensureReady(s);
  const rm = await runGuest(ctx.mgr, s, { argv: ['rm', '-f', RECORDING], timeoutMs: 10_000 });
  if (rm.code !== 0) return json(500, { status: 'error', message: `Failed to remove old recording file: ${rm.stderr.trim()}` });
  const { width, height } = (await ctx.display.connection(s)).screenSize();
  const child = spawnGuest(ctx.mgr, s, [
    'ffmpeg',
    '-y',
    '-f',
    'x11grab',
    '-draw_mouse',
    '1',
    '-s',
    `${width}x${height}`,
    '-i',
    ':0.0',
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-r',
    '30',
    RECORDING,
  ]);
  rec.child = child;
  rec.generation = s.generation;
  rec.stderr = '';
  child.stdin!.on('error', () => {});
  child.stdout!.resume();
  child.stderr!.on('data', (d: Buffer) => {
    rec.stderr = (rec.stderr! + d.toString()).slice(-4000);
  });
  child.on('error', () => {});
  const exited = await Promise.race([new Promise<boolean>((r) => child.once('close', () => r(true))), sleep(2000).then(() => false)]);
  if (exited) {
    rec.child = undefined;
    return json(500, { status: 'error', message: `Failed to start recording. ffmpeg exited: ${rec.stderr}` });
  }
  return json(200, { status: 'success', message: 'Started recording successfully.' });
};

const routeEndRecording: Handler = async (ctx, s, _req, rec) => {
  const child = rec.child;
  if (!child || child.exitCode !== null || child.signalCode !== null || rec.generation !== s.generation) {
    rec.child = undefined;
    return json(400, { status: 'error', message: 'No recording in progress to stop.' });
  }
  rec.child = undefined;
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  // Our own runtime exec process; runc forwards the signal to ffmpeg, which finalises the file.
  child.kill('SIGINT');
  const done = await Promise.race([closed.then(() => true), sleep(15_000).then(() => false)]);
  if (!done) {
    child.kill('SIGKILL');
    return json(500, { status: 'error', message: 'Recording process was unresponsive and had to be killed.' });
  }
  const r = await readGuestFile(ctx, s, RECORDING);
  if (r.code !== 0 || r.stdout.length === 0) return flaskPage(500, 'Internal Server Error', 'Recording failed. The output file is missing or empty.');
  return attachment(r.stdout, RECORDING, 'video/mp4');
};

// ------------------------------------------------------------------ scripts

const routeRunPython: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.code !== 'string' || !b.code) return json(400, { status: 'error', message: 'Code not supplied!' });
  ensureReady(s);
  await prepare(ctx, s);
  const id = randomUUID();
  const script = 'f=/tmp/python_exec_$1.py; cat > "$f"; /usr/bin/python3 "$f"; rc=$?; rm -f "$f"; exit $rc';
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', id], stdin: b.code, timeoutMs: 30_000, signal: req.signal });
  if (r.timedOut) {
    return json(500, {
      status: 'error',
      message: 'Execution timeout: Code execution exceeded 30 seconds',
      error: 'TimeoutExpired',
      need_more: false,
      output: null,
    });
  }
  const out = r.stdout.toString('utf8');
  return json(200, {
    status: r.code === 0 ? 'success' : 'error',
    message: `${out}\n${r.stderr}`,
    need_more: false,
    output: out,
    error: r.stderr || (r.code !== 0 ? `Process exited with code ${r.code}` : ''),
    return_code: r.code,
  });
};

const routeRunBash: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.script !== 'string' || !b.script) return json(400, { status: 'error', output: 'Script not supplied!', error: '', returncode: -1 });
  const timeoutS = typeof b.timeout === 'number' && b.timeout > 0 ? b.timeout : 100;
  ensureReady(s);
  await prepare(ctx, s);
  let cwd = HOME;
  if (typeof b.working_dir === 'string' && b.working_dir) {
    cwd = posix.resolve(HOME, expandPath(b.working_dir, userEnv(ctx)));
    const t = await runGuest(ctx.mgr, s, { argv: ['test', '-d', cwd], timeoutMs: 10_000 });
    if (t.code !== 0) return json(400, { status: 'error', output: `Working directory does not exist: ${cwd}`, error: '', returncode: -1 });
  }
  const body = b.script.includes('#!/bin/bash') ? b.script : `#!/bin/bash\n\n${b.script}`;
  const id = randomUUID();
  const wrapper = 'f=/tmp/bash_script_$1.sh; cat > "$f"; chmod 755 "$f"; /bin/bash "$f"; rc=$?; rm -f "$f"; exit $rc';
  const r = await runGuest(ctx.mgr, s, {
    argv: ['/bin/sh', '-c', wrapper, 'sh', id],
    stdin: body,
    timeoutMs: timeoutS * 1000,
    cwd,
    mergeStderr: true,
    signal: req.signal,
  });
  if (r.timedOut) return json(500, { status: 'error', output: `Script execution timed out after ${timeoutS} seconds`, error: '', returncode: -1 });
  return json(200, { status: r.code === 0 ? 'success' : 'error', output: r.stdout.toString('utf8'), error: '', returncode: r.code });
};

// ------------------------------------------------------------------ table and dispatch

const ROUTES: Record<string, Partial<Record<string, Handler>>> = {
  '/execute': { POST: routeExecute },
  '/setup/execute': { POST: routeExecute },
  '/execute_with_verification': { POST: routeExecuteVerify },
  '/setup/execute_with_verification': { POST: routeExecuteVerify },
  '/setup/launch': { POST: routeLaunch },
  '/screenshot': { GET: routeScreenshot },
  '/terminal': { GET: routeTerminal },
  '/accessibility': { GET: routeAccessibility },
  '/screen_size': { POST: routeScreenSize },
  '/window_size': { POST: routeWindowSize },
  '/desktop_path': { POST: routeDesktopPath },
  '/wallpaper': { POST: routeWallpaper },
  '/list_directory': { POST: routeListDirectory },
  '/file': { POST: routeFile },
  '/setup/upload': { POST: routeUpload },
  '/platform': { GET: routePlatform },
  '/cursor_position': { GET: routeCursor },
  '/setup/change_wallpaper': { POST: routeChangeWallpaper },
  '/setup/download_file': { POST: routeDownloadFile },
  '/setup/open_file': { POST: routeOpenFile },
  '/setup/activate_window': { POST: windowRoute('a', 'Window activated successfully') },
  '/setup/close_window': { POST: windowRoute('c', 'Window closed successfully.') },
  '/start_recording': { POST: routeStartRecording },
  '/end_recording': { POST: routeEndRecording },
  '/run_python': { POST: routeRunPython },
  '/run_bash_script': { POST: routeRunBash },
};

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((r) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      r();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

function send(res: ServerResponse, r: Reply): void {
  if (res.headersSent || res.destroyed) return;
  let data: Buffer;
  if (Buffer.isBuffer(r.body)) data = r.body;
  else if (typeof r.body === 'string') data = Buffer.from(r.body);
  else data = Buffer.from(JSON.stringify(r.body) + '\n');
  res.writeHead(r.status, { 'content-type': r.type ?? 'application/octet-stream', 'content-length': data.length, ...r.headers });
  res.end(data);
}

/** The request handler of one session's listener. */
export function guestHandler(ctx: GuestContext) {
  const rec: RecordingState = {};
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const route = ROUTES[path];
    const method = req.method === 'HEAD' ? 'GET' : (req.method ?? 'GET');
    if (!route) {
      req.resume();
      return send(res, flaskPage(404, 'Not Found', 'The requested URL was not found on the server.'));
    }
    const h = route[method];
    if (!h) {
      req.resume();
      return send(res, flaskPage(405, 'Method Not Allowed', 'The method is not allowed for the requested URL.'));
    }
    const ac = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) ac.abort();
    });
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (d: Buffer) => {
      size += d.length;
      if (size > ctx.mgr.config.osworldMaxBodyBytes) {
        tooBig = true;
        return;
      }
      chunks.push(d);
    });
    req.on('error', () => ac.abort());
    req.on('end', () => {
      if (tooBig) return send(res, json(413, { status: 'error', message: `request body is over ${ctx.mgr.config.osworldMaxBodyBytes} bytes` }));
      const s = ctx.session();
      if (!s) return send(res, json(503, { status: 'error', message: 'the session is gone' }));
      h(ctx, s, { raw: req, body: Buffer.concat(chunks), signal: ac.signal }, rec)
        .then(
          (r) => send(res, r),
          (e) => {
            if (e instanceof HttpError) {
              return send(res, e.status === 400 && typeof e.body === 'string' ? flaskPage(400, 'Bad Request', e.body) : json(e.status, e.body));
            }
            log('warn', 'osworld route failed', { path, id: s.id, error: errorMessage(e) });
            send(res, json(500, { status: 'error', message: errorMessage(e) }));
          },
        )
        .catch(() => {});
    });
  };
  return {
    handler,
    /** Stops a running recording (session destroy). */
    close() {
      rec.child?.kill('SIGKILL');
      rec.child = undefined;
    },
  };
}
