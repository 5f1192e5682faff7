// Files: /file, /setup/upload, /list_directory, the wallpaper, /setup/download_file.

import { basename, extname, posix } from 'node:path';
import { errorMessage } from '../../common/errors.ts';
import type { Session } from '../../session/manager.ts';
import { expandPath } from '../command.ts';
import { HOME, runGuest } from '../guest-exec.ts';
import { ensureReady, flaskPage, type GuestContext, type Handler, json, parseForm, parseJson, type Reply, text, userEnv } from '../http.ts';
import { prepare } from '../prepare.ts';

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

export function attachment(data: Buffer, path: string, type?: string): Reply {
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
    /Is a directory|Not a directory|No such device or address|File name too long|Too many levels of symbolic links|Read-only file system|Invalid argument|No such file or directory|Directory nonexistent|Text file busy|File exists/.test(
      stderr,
    )
  )
    return 400;
  if (/No space left on device|Disk quota exceeded/.test(stderr)) return 507;
  return undefined;
}

/** Reads a regular file inside the session as the desktop user: exit 44 = missing. */
export async function readGuestFile(ctx: GuestContext, s: Session, path: string) {
  return runGuest(ctx.mgr, s, {
    argv: ['/bin/sh', '-c', '[ -f "$1" ] || exit 44; exec cat -- "$1"', 'sh', path],
    timeoutMs: 120_000,
    maxOutputBytes: ctx.mgr.config.osworldMaxBodyBytes,
  });
}

export const routeFile: Handler = async (ctx, s, req) => {
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

/**
 * /setup/upload inside the session as the desktop user, atomically: the data goes to a temporary file next to
 * the target (same directory, so same filesystem; the target's mode if it exists, else the umask's), which is
 * renamed over the target only once all of it is written. On any failure (a full disk, a killed writer) the
 * old file is untouched and the temporary file is removed. A symlink at the target is followed, as a plain
 * write through it would be, so the link stays and its target gets the data; an existing target that is not a
 * regular file (a device, a FIFO) is written in place. Everything resolves inside the session's own root.
 */
const UPLOAD_SH = [
  'p=$1',
  // A link that does not resolve (a loop, a missing directory): the shell's own open error, nothing written.
  'if [ -L "$p" ]; then p=$(readlink -f -- "$p") || { : >> "$1"; exit 1; }; fi',
  'if [ -d "$p" ]; then echo "$p: Is a directory" >&2; exit 1; fi',
  // Not a regular file (a device, a FIFO): nothing to replace, written in place as before.
  'if [ -e "$p" ] && [ ! -f "$p" ]; then exec cat > "$p"; fi',
  'd=$(dirname -- "$p")',
  'mkdir -p -- "$d" || exit 1',
  't=$(mktemp -- "$d/.drums-upload.XXXXXXXX") || exit 1',
  'trap \'rm -f -- "$t"\' EXIT',
  "trap 'exit 1' HUP INT TERM PIPE",
  'if [ -e "$p" ]; then chmod --reference="$p" -- "$t"; else chmod -- "$(printf %o $((0666 & ~$(umask))))" "$t"; fi || exit 1',
  'cat > "$t" && mv -f -T -- "$t" "$p"',
].join('\n');

export const routeUpload: Handler = async (ctx, s, req) => {
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
    const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', UPLOAD_SH, 'sh', path], stdin: data, timeoutMs: 600_000 });
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

export const routeListDirectory: Handler = async (ctx, s, req) => {
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

export const routeWallpaper: Handler = async (ctx, s) => {
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

export const routeChangeWallpaper: Handler = async (ctx, s, req) => {
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

export const routeDownloadFile: Handler = async (ctx, s, req) => {
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
