import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { joinSockets } from '../src/common/tcp.ts';
import { startXvfb, stopChild, type XvfbHandle } from '../src/testing/xvfb.ts';
import type { ArmCtx, ArmHooks } from './arm.ts';

/**
 * The shared-browser arm: one Chromium on the host serves every session, each
 * session getting a browser context (a profile) of its own with one page. The
 * sessions themselves run the desktop only (Xvfb, openbox, buses). Memory per
 * added session is then the desktop plus one context in the shared browser.
 *
 * Tools inside a session reach their browser through its DevTools endpoint
 * (OSWorld's tasks do, on port 9222), so the design exposes that endpoint to
 * sessions. The in-run probe does exactly that for session A and checks
 * whether A can read and drive session B's page through it.
 */

/** The flags session-init gives a session's own Chromium (guest/session-init), so both arms run the same browser. */
const CHROMIUM_FLAGS = [
  '--no-sandbox',
  '--test-type',
  '--disable-gpu',
  '--no-first-run',
  '--no-default-browser-check',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--disable-extensions',
  '--password-store=basic',
  '--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup,PreloadTopChromeWebUI,SpareRendererForSitePerProcess,Translate,MediaRouter',
  '--enable-features=NetworkServiceInProcess2',
  '--in-process-gpu',
  '--renderer-process-limit=1',
  '--process-per-site',
];
const CHROMIUM = '/usr/lib/chromium/chromium';
export const PROBE_ID = 'shared-browser.cross-session-devtools';

interface State {
  x: XvfbHandle;
  chrome: ChildProcess;
  userDataDir: string;
  browser: Browser;
  cdpPort: number;
  pages: Map<string, { context: BrowserContext; page: Page }>;
}

export function sharedBrowserUnavailable(): string | null {
  if (!existsSync(CHROMIUM)) return `${CHROMIUM} not found on the host (apt install chromium): the shared browser runs on the host`;
  return null;
}

/** The arm's machinery. `forwardPort` is the session-side port of the DevTools endpoint (allowed in each session's hostPorts). */
export function sharedBrowser(forwardPort: number): {
  hooks: ArmHooks;
  afterStart(c: DrumsClient, s: SessionInfo, url?: string): Promise<void>;
  afterDestroy(s: SessionInfo): Promise<void>;
  step(c: DrumsClient, s: SessionInfo): Promise<void>;
} {
  let st: State | undefined;
  const need = (): State => {
    if (!st) throw new Error('shared-browser: the shared Chromium is not running (arm hooks not entered)');
    return st;
  };

  async function start(): Promise<State> {
    const x = await startXvfb({ width: 1280, height: 800 });
    const userDataDir = mkdtempSync(join(tmpdir(), 'drums-bench-shared-browser-'));
    let chrome: ChildProcess | undefined;
    try {
      chrome = x.spawnClient(CHROMIUM, [
        ...CHROMIUM_FLAGS,
        `--user-data-dir=${userDataDir}`,
        '--remote-debugging-address=127.0.0.1',
        '--remote-debugging-port=0',
        '--window-position=0,0',
        '--window-size=1280,800',
        'about:blank',
      ]);
      const portFile = join(userDataDir, 'DevToolsActivePort');
      const end = Date.now() + 30_000;
      while (!existsSync(portFile) || !readFileSync(portFile, 'utf8').includes('\n')) {
        if (chrome.exitCode !== null || chrome.signalCode !== null)
          throw new Error(`the shared Chromium exited (${chrome.exitCode ?? chrome.signalCode}) before opening its DevTools endpoint`);
        if (Date.now() > end) throw new Error('the shared Chromium did not open its DevTools endpoint within 30 s');
        await new Promise((r) => setTimeout(r, 50));
      }
      const cdpPort = Number(readFileSync(portFile, 'utf8').split('\n')[0]);
      const { chromium } = await import('playwright-core');
      const browser = await chromium.connectOverCDP(`http://127.0.0.1:${cdpPort}`);
      return { x, chrome, userDataDir, browser, cdpPort, pages: new Map() };
    } catch (e) {
      await x.stop();
      rmSync(userDataDir, { recursive: true, force: true });
      throw e;
    }
  }

  async function stop(): Promise<void> {
    const s = st;
    st = undefined;
    if (!s) return;
    for (const { context } of s.pages.values()) await context.close().catch(() => {});
    await s.browser.close().catch(() => {});
    await stopChild(s.chrome);
    await s.x.stop();
    rmSync(s.userDataDir, { recursive: true, force: true });
  }

  async function closeFor(id: string): Promise<void> {
    const e = st?.pages.get(id);
    if (!e) return;
    st!.pages.delete(id);
    await e.context.close().catch(() => {});
  }

  return {
    hooks: {
      async enter(ctx: ArmCtx) {
        ctx.status('shared-browser: starting the shared Chromium on the host');
        st = await start();
      },
      async exit() {
        await stop();
      },
      async settle() {
        const s = need();
        return { sharedBrowser: { contexts: s.pages.size, pssMiB: treePssMiB(s.chrome.pid!) } };
      },
      async collect(ctx: ArmCtx, sessions: SessionInfo[]) {
        const s = need();
        ctx.data.sharedBrowserPss = { pssMiB: treePssMiB(s.chrome.pid!), processes: treePids(s.chrome.pid!).length, contexts: s.pages.size };
        if (sessions.length >= 2) {
          ctx.status(`shared-browser: probe ${PROBE_ID} (session A reads and drives B's page)`);
          ctx.data.isolationProbe = await probe(ctx.c, s, sessions[0]!, sessions[1]!, forwardPort);
        }
      },
    },
    async afterStart(_c, s, url) {
      const state = need();
      await closeFor(s.id); // a reset: the session's old profile goes with it
      if (!url) return;
      const context = await state.browser.newContext({ viewport: null });
      try {
        const page = await context.newPage();
        await page.goto(url);
        // Mark the page with its session so the probe can tell whose page it reads.
        await page.evaluate((id) => {
          document.title = `bench ${id}`;
        }, s.id);
        state.pages.set(s.id, { context, page });
      } catch (e) {
        await context.close().catch(() => {});
        throw e;
      }
    },
    async afterDestroy(s) {
      await closeFor(s.id);
    },
    async step(_c, s) {
      const e = need().pages.get(s.id);
      if (!e) throw new Error(`shared-browser: session ${s.id} has no page in the shared browser`);
      await e.page.mouse.click(5, 5);
      const png = await e.page.screenshot({ type: 'png' });
      if (png.length < 1000) throw new Error(`shared-browser: screenshot of ${s.id} is ${png.length} bytes`);
    },
  };
}

/**
 * From inside session A, through the DevTools endpoint the design gives A
 * (forwarded from A's gateway to the shared browser), list the browser's pages
 * and activate B's. Observed = A saw B's page and B's page came to the front.
 */
async function probe(c: DrumsClient, st: State, a: SessionInfo, b: SessionInfo, port: number): Promise<{ id: string; observed: boolean; detail: string }> {
  const closeForward = await forward(a.network.gateway, port, st.cdpPort);
  try {
    const script = [
      'import json, sys, urllib.request',
      `base = "http://${a.network.gateway}:${port}"`,
      'pages = json.load(urllib.request.urlopen(base + "/json/list", timeout=10))',
      `theirs = [p for p in pages if p.get("title") == "bench ${b.id}"]`,
      'out = {"pages": len(pages), "titles": [p.get("title") for p in pages][:8], "sawB": bool(theirs)}',
      'if theirs:',
      '    r = urllib.request.Request(base + "/json/activate/" + theirs[0]["id"], method="PUT")',
      '    out["activateB"] = urllib.request.urlopen(r, timeout=10).read().decode().strip()',
      'print(json.dumps(out))',
    ].join('\n');
    const r = await c.exec(a.id, { argv: ['python3', '-c', script], timeoutMs: 30_000 });
    if (r.exitCode !== 0) return { id: PROBE_ID, observed: false, detail: `probe did not run in ${a.id}: exit ${r.exitCode}: ${r.stderr.trim().slice(-300)}` };
    const out = JSON.parse(r.stdout.trim()) as { pages: number; titles: string[]; sawB: boolean; activateB?: string };
    const drove = /activated/i.test(out.activateB ?? '');
    return {
      id: PROBE_ID,
      observed: out.sawB,
      detail: `from inside session ${a.id}, GET /json/list on the DevTools endpoint listed ${out.pages} pages of the shared browser${out.sawB ? `, among them session ${b.id}'s ("bench ${b.id}")` : ''}${out.activateB !== undefined ? `; PUT /json/activate on B's page answered "${out.activateB}"${drove ? " (A drove B's browser)" : ''}` : ''}`,
    };
  } finally {
    await closeForward();
  }
}

/** A TCP forwarder from a session's gateway address to the shared browser's loopback DevTools port, for the probe's duration; resolves to its close. */
async function forward(host: string, port: number, to: number): Promise<() => Promise<void>> {
  const open = new Set<Socket>();
  const srv = createServer((down) => {
    open.add(down);
    down.on('close', () => open.delete(down));
    joinSockets(down, connect(to, '127.0.0.1'));
  });
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, host, () => resolve());
  });
  return () =>
    new Promise<void>((resolve) => {
      for (const s of open) s.destroy();
      srv.close(() => resolve());
    });
}

function treePids(root: number): number[] {
  const out: number[] = [];
  const walk = (pid: number) => {
    out.push(pid);
    let kids: number[] = [];
    try {
      kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      /* exited */
    }
    for (const k of kids) walk(k);
  };
  walk(root);
  return out;
}

/** PSS (MiB) of the shared Chromium's whole process tree. */
function treePssMiB(root: number): number {
  let kib = 0;
  for (const pid of treePids(root)) {
    try {
      kib += Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0);
    } catch {
      /* exited */
    }
  }
  return Math.round((kib / 1024) * 10) / 10;
}
