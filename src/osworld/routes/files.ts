// Files: /file, /setup/upload, /list_directory, the wallpaper, /setup/download_file.

import { basename, extname, posix } from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { Busboy, type BusboyHeaders, type BusboyInstance } from '@fastify/busboy';
import { errorMessage } from '../../common/errors.ts';
import type { Session } from '../../session/manager.ts';
import { expandPath } from '../command.ts';
import { GUEST_OUTPUT_BYTES, type GuestResult, HOME, overflowMessage, runGuest, spawnGuest } from '../guest-exec.ts';
import { ensureReady, flaskPage, type GuestContext, type Handler, json, parseForm, parseJson, type Reply, text, userEnv } from '../guest.ts';
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

/**
 * Opens the file first (its open error, no header), then a header line, then the data. Exit 44 = missing (or,
 * with a second argument, empty).
 */
const READ_SH = '[ -f "$1" ] || exit 44; exec 3< "$1"; [ -z "${2-}" ] || [ -s "$1" ] || exit 44; printf "drums-file\\n"; exec cat <&3';
const READ_HEADER = Buffer.from('drums-file\n');
const STDERR_CAP = 64 * 1024;

/**
 * A regular file inside the session, as the desktop user, streamed: the reply's status comes from the
 * header line (or the exit and stderr when there is none), then the data goes to the socket with
 * backpressure, so the daemon holds no more than the pipes' buffers. A reader that fails after the
 * header (or a file past DRUMS_OSWORLD_MAX_BODY) ends the connection instead of completing the reply;
 * a client that goes away TERMs the reader (KILL 4 s later).
 */
export function streamGuestFile(
  ctx: GuestContext,
  s: Session,
  path: string,
  o: { nonEmpty?: boolean } = {},
): Promise<{ body: Readable } | { code: number; stderr: string }> {
  const cap = ctx.mgr.config.osworldMaxBodyBytes;
  const child = spawnGuest(ctx.mgr, s, ['/bin/sh', '-c', READ_SH, 'sh', path, ...(o.nonEmpty ? ['nonempty'] : [])], { timeoutMs: 600_000 });
  return new Promise((resolve, reject) => {
    let head = Buffer.alloc(0);
    let stderr = '';
    let exited = false;
    let code = 0;
    const body = new PassThrough();
    let streaming = false;
    let sent = 0;
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < STDERR_CAP) stderr += d.toString('utf8');
    });
    const stop = () => {
      if (exited) return;
      child.kill('SIGTERM');
      setTimeout(() => exited || child.kill('SIGKILL'), 4000).unref();
    };
    const onHead = (d: Buffer) => {
      head = Buffer.concat([head, d]);
      if (head.length < READ_HEADER.length) return;
      child.stdout!.removeListener('data', onHead);
      if (!head.subarray(0, READ_HEADER.length).equals(READ_HEADER)) {
        stop();
        return;
      }
      streaming = true;
      body.once('close', stop);
      const rest = head.subarray(READ_HEADER.length);
      const write = (b: Buffer) => {
        sent += b.length;
        if (sent > cap) {
          stop();
          return body.destroy(new Error(`${path}: over ${cap} bytes`));
        }
        if (!body.write(b)) child.stdout!.pause();
      };
      if (rest.length) write(rest);
      child.stdout!.on('data', write);
      body.on('drain', () => child.stdout!.resume());
      resolve({ body });
    };
    child.stdout!.on('data', onHead);
    child.stdin!.on('error', () => {});
    child.stdin!.end();
    child.on('error', (e) => (streaming ? body.destroy(e) : reject(e)));
    child.on('close', (c, sig) => {
      exited = true;
      code = c ?? (sig ? 137 : 1);
      if (!streaming) return resolve({ code: code === 0 ? 1 : code, stderr });
      if (code === 0) body.end();
      else body.destroy(new Error(`reading ${path} failed in the session (exit ${code}): ${stderr.trim()}`));
    });
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
    const r = await streamGuestFile(ctx, s, path);
    if ('body' in r) return { ...attachment(Buffer.alloc(0), path), body: r.body };
    if (r.code === 44) return json(404, { error: 'File not found' });
    if (guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: `Failed to serve file: ${r.stderr.trim()}` });
    return json(500, { error: `Failed to serve file: ${r.stderr.trim() || `exit ${r.code}`}` });
  } catch (e) {
    return json(500, { error: `Failed to serve file: ${errorMessage(e)}` });
  }
};

/**
 * /setup/upload streams: the body goes from the socket through a streaming multipart parser (@fastify/busboy)
 * into a writer inside the session, as the desktop user, with backpressure all the way (the daemon holds at
 * most one frame, FRAME_BYTES, of each upload, plus the parser's and the pipes' buffers).
 *
 * The writer reads frames, `<n>\n` then n bytes (each copied by `head -c n`, which reads no further), and
 * only a final `0\n` commits. The daemon sends that only once the whole form has been parsed and is valid;
 * anything else that ends the writer's stdin (a client gone mid-body, a body over the limit, a malformed
 * form, the daemon itself dying) is an end of input without it, so the writer exits 1 and its trap removes
 * the temporary file. A writer that has not ended WRITER_ABORT_GRACE_MS after an abort (one blocked on a FIFO
 * with no reader) is TERMed as well, through the in-session `timeout` (runInSession's signal). Not at once: a
 * TERM to the process group while the writer is in its cleanup would kill the cleanup's rm.
 */
const FRAME_BYTES = 1024 * 1024;
const FRAMES_SH = [
  'frames() {',
  '  while IFS= read -r n; do',
  '    case $n in 0) return 0 ;; "" | *[!0-9]*) exit 1 ;; esac',
  '    head -c "$n" || exit 1',
  '  done',
  '  exit 1',
  '}',
].join('\n');

/**
 * The writer, atomically: the data goes to a temporary file next to the target (same directory, so same
 * filesystem; the target's mode if it exists, else the umask's), which is renamed over the target only once
 * all of it is written. On any failure (a full disk, an input that ends without its commit, a TERM) the old
 * file is untouched and the temporary file is removed. A symlink at the target is followed, as a plain write
 * through it would be, so the link stays and its target gets the data; an existing target that is not a
 * regular file (a device, a FIFO) is written in place. Everything resolves inside the session's own root.
 * $1 is the target; $2, if given, a staged file (below) that is the data instead of stdin, removed after.
 */
const UPLOAD_SH = [
  FRAMES_SH,
  'fill() { if [ -n "$src" ]; then cat -- "$src"; else frames; fi; }',
  'p=$1 src=${2-}',
  // A cleanup ignores the signals first, and so does its rm (an ignored signal stays ignored across exec): an
  // abort ends the input and signals the process group at once, and the TERM must not kill the rm that the
  // end of the input started.
  '[ -z "$src" ] || trap \'trap "" HUP INT TERM PIPE; rm -f -- "$src"\' EXIT',
  "trap 'exit 1' HUP INT TERM PIPE",
  // A link that does not resolve (a loop, a missing directory): the shell's own open error, nothing written.
  'if [ -L "$p" ]; then p=$(readlink -f -- "$p") || { : >> "$1"; exit 1; }; fi',
  'if [ -d "$p" ]; then echo "$p: Is a directory" >&2; exit 1; fi',
  // Not a regular file (a device, a FIFO): nothing to replace, written in place as before.
  'if [ -e "$p" ] && [ ! -f "$p" ]; then fill > "$p"; exit; fi',
  'd=$(dirname -- "$p")',
  'mkdir -p -- "$d" || exit 1',
  't=$(mktemp -- "$d/.drums-upload.XXXXXXXX") || exit 1',
  'trap \'trap "" HUP INT TERM PIPE; rm -f -- "$t" ${src:+"$src"}\' EXIT',
  'if [ -e "$p" ]; then chmod --reference="$p" -- "$t"; else chmod -- "$(printf %o $((0666 & ~$(umask))))" "$t"; fi || exit 1',
  'fill > "$t" && mv -f -T -- "$t" "$p"',
].join('\n');

/**
 * A file_data that comes before its file_path (the target is not known yet) is staged in the session's /tmp
 * by the same frames, then placed by UPLOAD_SH with the staged file as its data; the staged file's name is
 * the output.
 */
const STAGE_SH = [
  FRAMES_SH,
  'umask 077',
  't=$(mktemp /tmp/.drums-upload.XXXXXXXX) || exit 1',
  'trap \'trap "" HUP INT TERM PIPE; rm -f -- "$t"\' EXIT',
  "trap 'exit 1' HUP INT TERM PIPE",
  'frames > "$t" || exit 1',
  'trap - EXIT',
  'printf %s "$t"',
].join('\n');

const UPLOAD_TIMEOUT_MS = 600_000;
const WRITER_ABORT_GRACE_MS = 10_000;

/** An AbortSignal that aborts `ms` after `signal` does, until `clear()`. */
function lateSignal(signal: AbortSignal, ms: number): { signal: AbortSignal; clear: () => void } {
  const ac = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const onAbort = () => {
    timer = setTimeout(() => ac.abort(), ms);
  };
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return {
    signal: ac.signal,
    clear: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    },
  };
}

/** One in-session writer fed frames from a file part, with backpressure. */
function startWriter(ctx: GuestContext, s: Session, argv: string[], file: Readable, signal: AbortSignal) {
  let stdin: Writable | undefined;
  let parts: Buffer[] = [];
  let size = 0;
  let bytes = 0;
  let dead = false;
  let fileEnded = false;
  let end: 'commit' | 'fail' | undefined;
  const flush = (): boolean => {
    if (!stdin || dead || end === 'fail' || size === 0) return true;
    stdin.write(`${size}\n`);
    let ok = true;
    for (const p of parts) ok = stdin.write(p);
    parts = [];
    size = 0;
    return ok;
  };
  const finish = () => {
    if (!stdin || !end || (end === 'commit' && !fileEnded)) return;
    if (end === 'commit') stdin.end('0\n');
    else stdin.end();
  };
  // The route's fail() ends the input on an abort; the TERM comes only to a writer that is still running later.
  const late = lateSignal(signal, WRITER_ABORT_GRACE_MS);
  const done = runGuest(ctx.mgr, s, {
    argv,
    timeoutMs: UPLOAD_TIMEOUT_MS,
    signal: late.signal,
    feed: (w) => {
      stdin = w;
      const gone = () => {
        // The writer has exited: the rest of the part is read and dropped so the form can be parsed to its end.
        dead = true;
        parts = [];
        size = 0;
        file.resume();
      };
      w.once('error', gone);
      w.once('close', gone);
      w.on('drain', () => file.resume());
    },
  });
  done.finally(late.clear).catch(() => {});
  file.on('data', (d: Buffer) => {
    bytes += d.length;
    if (dead || end === 'fail') return;
    parts.push(d);
    size += d.length;
    if (size >= FRAME_BYTES && !flush()) file.pause();
  });
  file.once('end', () => {
    fileEnded = true;
    flush();
    finish();
  });
  return {
    done,
    bytes: () => bytes,
    /** Commits once the part has ended (the form has been parsed whole and is valid). */
    commit() {
      end ??= 'commit';
      finish();
    },
    /** Ends the writer's input without the commit: it removes its temporary file and exits 1. */
    fail() {
      end = 'fail';
      parts = [];
      size = 0;
      file.resume();
      finish();
    },
  };
}

function uploadFailed(r: GuestResult): Reply | undefined {
  if (r.code === 0) return undefined;
  if (guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: `Failed to upload file: ${r.stderr.trim()}` });
  return json(500, { error: `Failed to upload file: ${r.stderr.trim() || (r.timedOut ? 'timed out' : `exit ${r.code}`)}` });
}

const REQUIRED = json(400, { error: 'file_path and file_data are required' });

export const routeUpload: Handler = (ctx, s, req) =>
  new Promise<Reply>((resolve) => {
    const input = req.stream!;
    let bb: BusboyInstance;
    try {
      // A part is a file when it has a filename, as in a whole-form parse (FormData's File entries).
      bb = Busboy({ headers: req.headers as BusboyHeaders, isPartAFile: (_n, _t, fileName) => fileName !== undefined });
    } catch {
      // Not multipart (or no boundary): no file_data; the body is read and dropped.
      input.resume();
      input.once('end', () => resolve(REQUIRED));
      input.once('close', () => resolve(REQUIRED));
      return;
    }
    let path: string | undefined;
    let writer: ReturnType<typeof startWriter> | undefined;
    let staged = false;
    let sawFile = false;
    let settled = false;
    const settle = (r: Reply) => {
      if (settled) return;
      settled = true;
      resolve(r);
    };
    const target = (p: string) => posix.resolve(HOME, expandPath(p, userEnv(ctx)));
    const stop = (r: Reply) => {
      writer?.fail();
      input.unpipe(bb);
      input.resume();
      if (!writer) return settle(r);
      writer.done.then(
        () => settle(r),
        () => settle(r),
      );
    };
    req.signal.addEventListener('abort', () => stop(json(500, { error: 'Failed to upload file: the request was aborted' })), { once: true });
    bb.on('field', (name: string, value: string) => {
      if (name === 'file_path' && path === undefined) path = value;
    });
    bb.on('file', (name: string, file: Readable) => {
      if (name === 'file_data') sawFile = true;
      if (name !== 'file_data' || writer || settled || (path !== undefined && (!path || badGuestPath(path))) || s.state !== 'ready') {
        file.resume();
        return;
      }
      staged = path === undefined;
      const argv = staged ? ['/bin/sh', '-c', STAGE_SH, 'sh'] : ['/bin/sh', '-c', UPLOAD_SH, 'sh', target(path!)];
      writer = startWriter(ctx, s, argv, file, req.signal);
      // The writer fails at once (a directory target, no permission): no need to wait for the body to end.
      writer.done.catch(() => {});
    });
    bb.once('error', () => stop(REQUIRED));
    bb.once('finish', async () => {
      try {
        if (settled) return;
        if (!path || !sawFile) return stop(REQUIRED);
        const bad = badGuestPath(path);
        if (bad) return stop(json(400, { error: `file_path: ${bad}` }));
        ensureReady(s);
        if (!writer) throw new Error(`session ${s.id} was not ready when the file arrived`);
        writer.commit();
        const r = await writer.done;
        if (settled) return;
        const failed = uploadFailed(r);
        if (failed) return settle(failed);
        if (staged) {
          const placed = await runGuest(ctx.mgr, s, {
            argv: ['/bin/sh', '-c', UPLOAD_SH, 'sh', target(path), r.stdout.toString('utf8')],
            timeoutMs: UPLOAD_TIMEOUT_MS,
          });
          const f = uploadFailed(placed);
          if (f) return settle(f);
        }
        settle(text(200, `File Uploaded: ${writer.bytes()} bytes`));
      } catch (e) {
        writer?.fail();
        settle(json(500, { error: `Failed to upload file: ${errorMessage(e)}` }));
      }
    });
    input.pipe(bb);
  });

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
  if (r.overflow) return json(500, { error: `the directory tree of ${path} is too large to list: ${overflowMessage(GUEST_OUTPUT_BYTES)}` });
  if (r.code === 3) return json(400, { error: 'The provided path is not a directory' });
  if (r.code !== 0 && guestFailure(r.stderr)) return json(guestFailure(r.stderr)!, { error: r.stderr.trim() });
  if (r.code !== 0) return json(500, { error: r.stderr.trim() || `exit ${r.code}` });
  return json(200, { directory_tree: JSON.parse(r.stdout.toString('utf8')) });
};

export const routeWallpaper: Handler = async (ctx, s) => {
  ensureReady(s);
  // A setting is a URI: 64 KiB is far past any path.
  const g = await runGuest(ctx.mgr, s, {
    argv: ['gsettings', 'get', 'org.gnome.desktop.background', 'picture-uri'],
    timeoutMs: 10_000,
    maxOutputBytes: 64 * 1024,
  });
  if (g.code !== 0 || g.overflow) return flaskPage(500, 'Internal Server Error', 'Could not read the wallpaper setting.');
  const path = g.stdout
    .toString('utf8')
    .trim()
    .replace(/^'|'$/g, '')
    .replace(/^file:\/\//, '');
  if (!path) return flaskPage(404, 'Not Found', 'Wallpaper file not found.');
  // Streamed like /file (the daemon holds no more than the pipes' buffers), up to DRUMS_OSWORLD_MAX_BODY.
  const r = await streamGuestFile(ctx, s, path).catch(() => undefined);
  if (r && 'body' in r) return { status: 200, body: r.body, type: 'image/png' };
  if (r?.code === 44) return flaskPage(404, 'Not Found', 'Wallpaper file not found.');
  return flaskPage(500, 'Internal Server Error', 'Failed to read the wallpaper.');
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
