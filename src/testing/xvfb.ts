/**
 * Test and benchmark harness: start a private Xvfb (+ optional openbox) as child processes and
 * stop exactly those children. Not used by the daemon (sessions start their X server in runc).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';

export interface XvfbHandle {
  display: number;
  socketPath: string;
  env: NodeJS.ProcessEnv;
  xvfb: ChildProcess;
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

function startOn(n: number, width: number, height: number, timeoutMs: number): Promise<ChildProcess | null> {
  return new Promise((resolve) => {
    const child = spawn('Xvfb', [`:${n}`, '-screen', '0', `${width}x${height}x24`, '-nolisten', 'tcp', '-noreset', '-displayfd', '3'], {
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
  for (let tries = 0; tries < 30 && !xvfb; tries++, n++) {
    if (fs.existsSync(`/tmp/.X${n}-lock`) || fs.existsSync(`/tmp/.X11-unix/X${n}`)) continue;
    xvfb = await startOn(n, width, height, timeoutMs);
    if (xvfb) break;
  }
  if (!xvfb) throw new Error('could not start Xvfb on a free display');
  const display = n;
  const env = { ...process.env, DISPLAY: `:${display}` };
  const children: ChildProcess[] = [];
  const handle: XvfbHandle = {
    display,
    socketPath: `/tmp/.X11-unix/X${display}`,
    env,
    xvfb,
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
