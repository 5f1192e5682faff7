/**
 * Test and benchmark harness: start a private Xvfb (+ optional openbox) as child processes and
 * stop exactly those children. Not used by the daemon (sessions start their X server in runc).
 *
 * Like a session's, the server has a cookie of its own (`-auth`): its socket is in the host's
 * /tmp/.X11-unix, where any local user could otherwise connect while a test runs. Its clients get
 * it through XAUTHORITY (`env`, `spawnClient`) or `cookie` (XDisplay.open's option).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface XvfbHandle {
  display: number;
  socketPath: string;
  env: NodeJS.ProcessEnv;
  xvfb: ChildProcess;
  /** The server's MIT-MAGIC-COOKIE-1 (hex). */
  cookie: string;
  children: ChildProcess[];
  /** Start another X client on this display; it is stopped by stop(). */
  spawnClient(cmd: string, args: string[], opts?: { env?: NodeJS.ProcessEnv }): ChildProcess;
  /** Stop all children (clients first, Xvfb last); resolves when every one has exited. */
  stop(): Promise<void>;
}

export interface StartXvfbOptions {
  width?: number;
  height?: number;
  /** First display number to try (default 200 + random, to avoid parallel test files colliding). */
  firstDisplay?: number;
  windowManager?: boolean;
  timeoutMs?: number;
}

function exited(c: ChildProcess): boolean {
  return c.exitCode !== null || c.signalCode !== null;
}

export function waitExit(c: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (exited(c)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      c.removeListener('exit', on);
      resolve(false);
    }, timeoutMs);
    const on = () => {
      clearTimeout(t);
      resolve(true);
    };
    c.once('exit', on);
  });
}

/** SIGTERM, then SIGKILL after graceMs; only ever signals this ChildProcess handle. */
export async function stopChild(c: ChildProcess, graceMs = 2000): Promise<void> {
  if (exited(c)) return;
  c.kill('SIGTERM');
  if (await waitExit(c, graceMs)) return;
  c.kill('SIGKILL');
  await waitExit(c, graceMs);
}

/**
 * An Xauthority file with one FamilyWild entry (any address, any display) for `cookie`: the Xau(3)
 * format, as src/display/xauth.ts writes it (which this layer may not import).
 */
function xauthority(cookie: string): Buffer {
  const field = (b: Buffer) => Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
  return Buffer.concat([
    Buffer.from([0xff, 0xff]),
    field(Buffer.alloc(0)),
    field(Buffer.alloc(0)),
    field(Buffer.from('MIT-MAGIC-COOKIE-1')),
    field(Buffer.from(cookie, 'hex')),
  ]);
}

function startOn(n: number, width: number, height: number, timeoutMs: number, auth: string): Promise<ChildProcess | null> {
  return new Promise((resolve) => {
    const child = spawn('Xvfb', [`:${n}`, '-screen', '0', `${width}x${height}x24`, '-auth', auth, '-nolisten', 'tcp', '-noreset', '-displayfd', '3'], {
      stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (ok) resolve(child);
      else {
        void stopChild(child).then(() => resolve(null));
      }
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    child.stderr!.on('data', () => {});
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (b: Buffer) => {
      out += b.toString();
      if (out.includes('\n')) finish(Number(out.trim()) === n);
    });
    child.once('exit', () => finish(false));
    child.once('error', () => finish(false));
  });
}

export async function startXvfb(opts: StartXvfbOptions = {}): Promise<XvfbHandle> {
  const width = opts.width ?? 1280,
    height = opts.height ?? 800;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  let n = opts.firstDisplay ?? 200 + Math.floor(Math.random() * 400);
  let xvfb: ChildProcess | null = null;
  const cookie = randomBytes(16).toString('hex');
  const authDir = fs.mkdtempSync(join(tmpdir(), 'drums-xvfb-'));
  const auth = join(authDir, 'Xauthority');
  fs.writeFileSync(auth, xauthority(cookie), { mode: 0o600 });
  for (let tries = 0; tries < 30 && !xvfb; tries++, n++) {
    if (fs.existsSync(`/tmp/.X${n}-lock`) || fs.existsSync(`/tmp/.X11-unix/X${n}`)) continue;
    xvfb = await startOn(n, width, height, timeoutMs, auth);
    if (xvfb) break;
  }
  if (!xvfb) {
    fs.rmSync(authDir, { recursive: true, force: true });
    throw new Error('could not start Xvfb on a free display');
  }
  const display = n;
  const env = { ...process.env, DISPLAY: `:${display}`, XAUTHORITY: auth };
  const children: ChildProcess[] = [];
  const handle: XvfbHandle = {
    display,
    socketPath: `/tmp/.X11-unix/X${display}`,
    env,
    xvfb,
    cookie,
    children,
    spawnClient(cmd, args, o = {}) {
      const c = spawn(cmd, args, { env: { ...env, ...o.env }, stdio: 'ignore' });
      c.on('error', () => {});
      children.push(c);
      return c;
    },
    async stop() {
      for (const c of children.slice().reverse()) await stopChild(c);
      await stopChild(xvfb!);
      if (xvfb!.signalCode === 'SIGKILL') {
        // A killed Xvfb cannot remove its socket and lock file: do it for this display only.
        for (const f of [`/tmp/.X11-unix/X${display}`, `/tmp/.X${display}-lock`]) fs.rmSync(f, { force: true });
      }
      fs.rmSync(authDir, { recursive: true, force: true });
    },
  };
  if (opts.windowManager) {
    handle.spawnClient('openbox', ['--sm-disable']);
    // Wait for openbox to claim the screen (EWMH check window on the root).
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ok = await new Promise<boolean>((resolve) => {
        const p = spawn('xprop', ['-root', '_NET_SUPPORTING_WM_CHECK'], { env, stdio: ['ignore', 'pipe', 'ignore'] });
        let s = '';
        p.stdout!.on('data', (b: Buffer) => {
          s += b;
        });
        p.on('exit', () => resolve(/window id/.test(s)));
        p.on('error', () => resolve(false));
      });
      if (ok) break;
      if (Date.now() > deadline) {
        await handle.stop();
        throw new Error('openbox did not start');
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return handle;
}
