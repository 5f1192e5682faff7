import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join, resolve } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import type { Arm, ArmCtx, ArmHooks, ArmOptions } from './arm.ts';
import { sessionPids } from './measure.ts';

/**
 * The seed-guest-server arm's machinery: the earlier prototype's shape, with
 * OSWorld's own Python guest server (desktop_env/server/main.py of an OSWorld
 * checkout the user points to with --osworld-src, a Flask app on port 5000)
 * running inside every session. Its code is never shipped in this repository:
 * at every session start (create and reset) the server's files are copied
 * from the checkout into the session and started there the way OSWorld's VM
 * unit starts it (`python main.py` as the desktop user, DISPLAY=:0, working
 * directory the home). A step goes through that server from the host over
 * HTTP, as OSWorld's host-side PythonController does: POST /execute with a
 * `python -c "import pyautogui; ...; pyautogui.click(...)"` command, then
 * GET /screenshot.
 */

export const SEED_GUEST_IMAGE = 'seed-guest';
/** Where the server lives in the checkout. */
export const SERVER_REL = 'desktop_env/server';
/** Where the server's files go inside the session (OSWorld's VM unit runs /home/user/server/main.py). */
export const GUEST_DIR = '/home/user/server';
export const GUEST_LOG = '/tmp/osworld-server.log';
export const GUEST_PORT = 5000;
/** The baseline arm's screen (the session default), instead of the osworld image's 1920x1080. */
export const SCREEN = '1280x800x24';
export const NO_SRC_REASON = 'needs --osworld-src DIR (an OSWorld checkout); not given';

const READY_TIMEOUT_MS = 30_000;
const STEP_TIMEOUT_MS = 30_000;
/** A checkout's server files above this total are refused (the server is two small Python files). */
const MAX_SERVER_BYTES = 16 * 1024 * 1024;

/** The checkout's server entry point for `--osworld-src DIR`. */
export const serverMain = (src: string): string => join(resolve(src), SERVER_REL, 'main.py');

/** Why the arm cannot run for these options, before the image check (null = it can, as far as the checkout goes). */
export function checkoutUnavailable(o: ArmOptions): string | null {
  if (!o.osworldSrc) return NO_SRC_REASON;
  const main = serverMain(o.osworldSrc);
  if (!existsSync(main) || !statSync(main).isFile()) {
    return `--osworld-src ${o.osworldSrc} is not an OSWorld checkout: its guest server was expected at ${main} (DIR/${SERVER_REL}/main.py)`;
  }
  return null;
}

export interface ServerFile {
  /** Path relative to the server directory. */
  rel: string;
  data: Buffer;
}

/** Top-level module names a Python file imports (absolute imports only). */
export function importedModules(source: string): string[] {
  const names = new Set<string>();
  for (const line of source.split('\n')) {
    const from = /^\s*from\s+([A-Za-z_]\w*)[\w.]*\s+import\b/.exec(line);
    if (from) {
      names.add(from[1]!);
      continue;
    }
    const imp = /^\s*import\s+([^#;]+)/.exec(line);
    if (imp) {
      for (const part of imp[1]!.split(',')) {
        const m = /^\s*([A-Za-z_]\w*)/.exec(part);
        if (m) names.add(m[1]!);
      }
    }
  }
  return [...names];
}

const pyFilesUnder = (root: string, rel: string): string[] => {
  const out: string[] = [];
  for (const e of readdirSync(join(root, rel), { withFileTypes: true })) {
    if (e.name === '__pycache__') continue;
    const r = `${rel}/${e.name}`;
    if (e.isDirectory()) out.push(...pyFilesUnder(root, r));
    else if (e.isFile() && e.name.endsWith('.py')) out.push(r);
  }
  return out;
};

/**
 * The server's files: main.py and the sibling modules (DIR/desktop_env/server/X.py
 * or package X/) that it imports, followed transitively. Nothing else of the
 * checkout is copied.
 */
export function serverFiles(src: string): ServerFile[] {
  const dir = join(resolve(src), SERVER_REL);
  const seen = new Set<string>();
  const files: ServerFile[] = [];
  let total = 0;
  const add = (rel: string) => {
    if (seen.has(rel)) return;
    seen.add(rel);
    const data = readFileSync(join(dir, rel));
    total += data.length;
    if (total > MAX_SERVER_BYTES) throw new Error(`the guest server's files in ${dir} exceed ${MAX_SERVER_BYTES >> 20} MiB; is ${src} an OSWorld checkout?`);
    files.push({ rel, data });
    for (const mod of importedModules(data.toString('utf8'))) {
      if (existsSync(join(dir, `${mod}.py`))) add(`${mod}.py`);
      else if (existsSync(join(dir, mod, '__init__.py'))) for (const f of pyFilesUnder(dir, mod)) add(f);
    }
  };
  add('main.py');
  return files;
}

const filesCache = new Map<string, ServerFile[]>();
const cachedServerFiles = (src: string): ServerFile[] => {
  const key = resolve(src);
  let f = filesCache.get(key);
  if (!f) filesCache.set(key, (f = serverFiles(src)));
  return f;
};

/**
 * One HTTP request on a fresh connection (no keep-alive pool: a session's
 * address is reused by later sessions, and OSWorld's client opens a new
 * connection per call too).
 */
export function guestHttp(
  address: string,
  method: string,
  path: string,
  o: { json?: unknown; timeoutMs?: number } = {},
): Promise<{ status: number; body: Buffer; contentType: string }> {
  const body = o.json === undefined ? undefined : Buffer.from(JSON.stringify(o.json));
  return new Promise((res, rej) => {
    const req = httpRequest(
      {
        host: address,
        port: GUEST_PORT,
        method,
        path,
        agent: false,
        headers: body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {},
      },
      (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (d: Buffer) => chunks.push(d));
        r.on('end', () => {
          clearTimeout(timer);
          res({ status: r.statusCode ?? 0, body: Buffer.concat(chunks), contentType: String(r.headers['content-type'] ?? '') });
        });
        r.on('error', (e) => {
          clearTimeout(timer);
          rej(e);
        });
      },
    );
    const timer = setTimeout(
      () => req.destroy(new Error(`${method} http://${address}:${GUEST_PORT}${path} timed out after ${o.timeoutMs ?? STEP_TIMEOUT_MS} ms`)),
      o.timeoutMs ?? STEP_TIMEOUT_MS,
    );
    req.on('error', (e) => {
      clearTimeout(timer);
      rej(e);
    });
    req.end(body);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The shell that starts the server in the background, detached from the exec (as the peer-vnc arm starts x11vnc). */
const START = [`cd /home/user || exit 1`, `setsid python3 ${GUEST_DIR}/main.py >${GUEST_LOG} 2>&1 < /dev/null &`, 'echo $!'].join('\n');

async function logTail(c: DrumsClient, s: SessionInfo): Promise<string> {
  try {
    const r = await c.exec(s.id, {
      shell: `tail -c 1500 ${GUEST_LOG} 2>&1; echo; echo "[processes]"; ps -eo pid,rss,args 2>/dev/null | grep -F ${GUEST_DIR}/main.py | grep -v grep`,
      timeoutMs: 10_000,
    });
    return r.stdout.trim() || '(empty log)';
  } catch (e) {
    return `(could not read ${GUEST_LOG}: ${(e as Error).message})`;
  }
}

/**
 * After a create or reset: copy the server's files into the session, start it
 * as the desktop user with the session's environment (DISPLAY=:0, the session
 * bus), and wait until it answers GET /platform from the host.
 */
export async function startGuestServer(c: DrumsClient, s: SessionInfo, src: string): Promise<void> {
  const files = cachedServerFiles(src);
  for (const f of files) await c.writeFile(s.id, `${GUEST_DIR}/${f.rel}`, f.data, { mode: '0644' });
  const r = await c.exec(s.id, { shell: START, env: { DISPLAY: ':0' }, timeoutMs: 10_000 });
  if (r.exitCode !== 0) throw new Error(`OSWorld guest server did not start in ${s.id}: ${r.stderr.trim().slice(-400)}`);
  const pid = Number(r.stdout.trim());
  const t0 = performance.now();
  let last = '';
  let checked = t0;
  while (performance.now() - t0 < READY_TIMEOUT_MS) {
    try {
      const p = await guestHttp(s.network.address, 'GET', '/platform', { timeoutMs: 2000 });
      if (p.status === 200) return;
      last = `GET /platform answered ${p.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    // Once a second: has the server exited (an import error, a port in use)? Then fail now, not after the timeout.
    if (pid > 0 && performance.now() - checked > 1000) {
      checked = performance.now();
      const alive = await c.exec(s.id, { argv: ['kill', '-0', String(pid)], timeoutMs: 5000 }).then(
        (x) => x.exitCode === 0,
        () => true,
      );
      if (!alive)
        throw new Error(
          `OSWorld guest server in ${s.id} exited before it answered on ${s.network.address}:${GUEST_PORT} (last: ${last}); log tail:\n${await logTail(c, s)}`,
        );
    }
    await sleep(100);
  }
  throw new Error(
    `OSWorld guest server in ${s.id} did not answer on ${s.network.address}:${GUEST_PORT} within ${READY_TIMEOUT_MS / 1000} s (last: ${last}); log tail:\n${await logTail(c, s)}`,
  );
}

/** The pyautogui prefix OSWorld's PythonController puts before every command. */
const PKGS_PREFIX = 'import pyautogui; import time; pyautogui.FAILSAFE = False; ';

/** One agent step through the in-session server: a click via POST /execute, then GET /screenshot (PNG). */
export async function guestStep(s: SessionInfo): Promise<void> {
  const a = s.network.address;
  const ex = await guestHttp(a, 'POST', '/execute', { json: { command: ['python', '-c', `${PKGS_PREFIX}pyautogui.click(x=5, y=5)`], shell: false } });
  let res: { status?: string; returncode?: number; error?: string; message?: string } = {};
  try {
    res = JSON.parse(ex.body.toString('utf8')) as typeof res;
  } catch {
    /* reported below */
  }
  if (ex.status !== 200 || res.returncode !== 0) {
    throw new Error(
      `seed-guest step: POST /execute in ${s.id} answered ${ex.status}: ${(res.error ?? res.message ?? ex.body.toString('utf8')).trim().slice(-300)}`,
    );
  }
  const shot = await guestHttp(a, 'GET', '/screenshot');
  const png = shot.body.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  if (shot.status !== 200 || !png || shot.body.length <= 1000) {
    throw new Error(`seed-guest step: GET /screenshot in ${s.id} answered ${shot.status} with ${shot.body.length} bytes (${png ? 'PNG' : 'not a PNG'})`);
  }
}

const r2 = (x: number) => Math.round(x * 100) / 100;

/**
 * PSS (MiB) of the guest server's processes in one session: the total and
 * each process's, by PID (in debug mode the first is the Werkzeug reloader,
 * the second the server it runs).
 */
export function guestServerPss(instance: string, sessionId: string): { pssMiB: number; processes: number; perProcessMiB: number[] } {
  const per: [number, number][] = [];
  for (const pid of sessionPids(instance, sessionId)) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmd.includes(`${GUEST_DIR}/main.py`)) continue;
      const roll = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      per.push([pid, Number(/^Pss:\s+(\d+)/m.exec(roll)?.[1] ?? 0) / 1024]);
    } catch {
      /* exited */
    }
  }
  per.sort((a, b) => a[0] - b[0]);
  return { pssMiB: r2(per.reduce((a, [, v]) => a + v, 0)), processes: per.length, perProcessMiB: per.map(([, v]) => r2(v)) };
}

/** At the largest N: the guest server's own PSS per session (kept in the trial's data as guestServer). */
export const seedGuestHooks = (): ArmHooks => ({
  // The in-session server serves OSWorld's contract: no host-side endpoint for these sessions (the osworld image would get one).
  labels: { 'drums.osworld': '0' },
  async collect(ctx: ArmCtx, sessions: SessionInfo[]) {
    const per = sessions.map((s) => guestServerPss(ctx.instance, s.id));
    const mean = per.length ? per.reduce((a, b) => a + b.pssMiB, 0) / per.length : NaN;
    ctx.data.guestServer = { pssMiB: per.map((p) => p.pssMiB), perProcessMiB: per.map((p) => p.perProcessMiB), meanPssMiB: r2(mean) };
  },
});

/**
 * The arm. The checkout comes from the run's ArmOptions, which only
 * `unavailable(o)` sees: the runner calls it for every arm before running
 * any, so the arm keeps the checkout it last accepted and its afterStart uses
 * that one.
 */
export function seedGuestArm(imageBuilt: (name: string) => string | null): Arm {
  let src: string | undefined;
  return {
    name: 'seed-guest-server',
    description: `OSWorld's own guest server inside every session (the earlier prototype's shape): ${SERVER_REL}/main.py and the sibling modules it imports, copied at every create and reset from the OSWorld checkout given with --osworld-src (never shipped in this repository) into ${GUEST_DIR}, and started as OSWorld's VM unit starts it (python main.py as the desktop user, DISPLAY=:0; Flask on 0.0.0.0:${GUEST_PORT} in debug mode, so the Werkzeug reloader runs it as two Python processes); image ${SEED_GUEST_IMAGE} (osworld + Flask, NumPy, Pillow 10.1.0 as OSWorld pins it), at the baseline's screen size (${SCREEN}), without Drums' host-side OSWorld endpoint. Create and reset include copying the files and waiting until the server answers`,
    image: SEED_GUEST_IMAGE,
    unavailable(o) {
      const why = checkoutUnavailable(o) ?? imageBuilt(SEED_GUEST_IMAGE);
      if (!why) {
        try {
          serverFiles(o.osworldSrc!);
        } catch (e) {
          return `cannot read the guest server from ${o.osworldSrc}: ${(e as Error).message}`;
        }
        src = o.osworldSrc;
      }
      return why;
    },
    // The baseline's screen (the osworld image defaults to 1920x1080), so the two arms differ by the server only.
    spec: (url) => ({ image: SEED_GUEST_IMAGE, screen: SCREEN, ...(url ? { url } : {}) }),
    async afterStart(c, s) {
      if (!src) throw new Error(`seed-guest-server: no OSWorld checkout accepted (${NO_SRC_REASON})`);
      await startGuestServer(c, s, src);
    },
    step: (_c, s) => guestStep(s),
    stepNote: `from the host over HTTP to the session's address:${GUEST_PORT}, a new connection per request as OSWorld's PythonController makes them: POST /execute with ["python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.click(x=5, y=5)"] (the server spawns that Python process), then GET /screenshot (pyautogui screenshot with the cursor pasted in, saved to a PNG file and sent back)`,
    hooks: seedGuestHooks(),
    isolation: {
      kind: 'as-baseline',
      why: `the sessions are baseline sessions (same runtime, namespaces, cgroup, seccomp; image osworld + Flask) with one more process tree run as the desktop user. The server listens on 0.0.0.0:${GUEST_PORT} inside the session's own network namespace: other sessions cannot reach it (the instance's nftables table drops session-to-session traffic), so isolation between sessions is the baseline's. What it adds is exposure toward the host: the server has no authentication and runs any command it is sent (/execute) as the desktop user, with Flask's debug mode on, so any process in the host's network namespace (any user) that can open a connection to the session's address can drive that session, where the baseline's API needs the daemon's token`,
    },
  };
}
