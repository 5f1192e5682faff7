import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { judge, loadBars } from './bars.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { summary } from './stats.ts';

/**
 * `drums bench ops`: latency of observe/act operations through the HTTP API at 1280x800,
 * against "the peers' way" (spawning xdotool / a Python screen grab inside the session via exec),
 * and the aggregate step rate of N sessions driven at once.
 */
export interface OpsBenchOptions {
  client: DrumsClient;
  runs: number;
  sessions: number;
  parallelSeconds: number;
  outDir: string;
  quick: boolean;
  progress: (msg: string) => void;
}

const FORM =
  'data:text/html,<title>ops bench</title><body style="margin:0;background:%23eef"><h1>Form</h1><form>' +
  '<label>Name <input name=n></label><label>Email <input name=e type=email></label><select name=s><option>a<option>b</select>' +
  '<textarea name=t></textarea><input type=checkbox name=c><button>Send</button></form></body>';

const ASCII100 = 'The quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmno.'.slice(0, 100);
const round = (s: ReturnType<typeof summary>) => ({ n: s.n, p50: +s.p50.toFixed(2), p95: +s.p95.toFixed(2), min: +s.min.toFixed(2), max: +s.max.toFixed(2) });

async function time(runs: number, fn: () => Promise<unknown>, warmup = 2) {
  for (let i = 0; i < warmup; i++) await fn();
  const xs: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  return round(summary(xs));
}

export async function runOpsBench(o: OpsBenchOptions) {
  const started = new Date().toISOString();
  const c = o.client;
  const results: Record<string, unknown> = {};
  const s = await c.createSession({ image: 'default', url: FORM, screen: '1280x800' });
  try {
    // Wait for the page's a11y tree (Chromium registers shortly after its window maps).
    for (let i = 0; i < 100; i++) {
      const x = (await c.a11y(s.id)) as string;
      if (x.includes('document-web') || x.includes('Email')) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    // Focus the Name input through the a11y tree-free way: click it (position from a first a11y walk is overkill; Tab works).
    await c.act(s.id, {
      actions: [
        { type: 'click', x: 640, y: 600 },
        { type: 'key', keys: ['Tab'] },
      ],
    });
    const api: Record<string, unknown> = {};
    const step = (name: string) => o.progress(`api ${name}`);
    // Client wall time, and the daemon's own capture + encode time (Server-Timing) apart from the transfer.
    const server: Record<string, number[]> = {};
    const shot = (key: string, format: 'png' | 'jpeg' | 'raw') => async () => {
      const r = await c.screenshotEx(s.id, { format, ...(format === 'jpeg' ? { quality: 80 } : {}) });
      if (r.serverMs !== undefined) (server[`${key}Server`] ??= []).push(r.serverMs);
    };
    step('screenshot png');
    api.screenshotPng = await time(o.runs, shot('screenshotPng', 'png'));
    step('screenshot jpeg');
    api.screenshotJpegQ80 = await time(o.runs, shot('screenshotJpegQ80', 'jpeg'));
    step('screenshot raw');
    api.screenshotRaw = await time(o.runs, shot('screenshotRaw', 'raw'));
    // The timed calls only (time() makes warm-up calls first).
    for (const [key, xs] of Object.entries(server)) api[key] = round(summary(xs.slice(-o.runs)));
    step('click');
    api.clickRoundTrip = await time(o.runs, () => c.act(s.id, { actions: [{ type: 'click', x: 1200, y: 760 }] }));
    step('action+screenshot');
    api.actionPlusScreenshotPng = await time(o.runs, () => c.act(s.id, { actions: [{ type: 'move', x: 1100, y: 700 }], screenshot: { format: 'png' } }));
    api.actionPlusScreenshotJpeg = await time(o.runs, () =>
      c.act(s.id, { actions: [{ type: 'move', x: 1100, y: 700 }], screenshot: { format: 'jpeg', quality: 80 } }),
    );
    await c.act(s.id, {
      actions: [
        { type: 'key', keys: ['Tab'] },
        { type: 'key', keys: ['shift', 'Tab'] },
      ],
    });
    step('type 100');
    api.type100Ascii = await time(
      Math.max(3, Math.floor(o.runs / 3)),
      () =>
        c.act(s.id, {
          actions: [
            { type: 'type', text: ASCII100 },
            { type: 'key', keys: ['ctrl', 'a'] },
            { type: 'key', keys: ['BackSpace'] },
          ],
        }),
      1,
    );
    step('a11y');
    api.a11yChromiumForm = await time(Math.max(3, Math.floor(o.runs / 3)), () => c.a11y(s.id), 1);
    step('exec true');
    api.execTrue = await time(o.runs, () => c.exec(s.id, { argv: ['true'] }));
    results.api = api;

    const peers: Record<string, unknown> = {};
    const pstep = (name: string) => o.progress(`peers ${name}`);
    pstep('xdotool click');
    peers.clickXdotool = await time(o.runs, () => c.exec(s.id, { argv: ['xdotool', 'mousemove', '1200', '760', 'click', '1'] }));
    pstep('xdotool type');
    peers.type100Xdotool = await time(Math.max(3, Math.floor(o.runs / 3)), () => c.exec(s.id, { argv: ['xdotool', 'type', '--delay', '0', ASCII100] }), 1);
    pstep('python grab');
    peers.screenshotPngPythonPil = await time(
      Math.max(3, Math.floor(o.runs / 3)),
      () =>
        c.exec(s.id, {
          argv: ['python3', '-c', 'from PIL import ImageGrab; ImageGrab.grab().save("/tmp/s.png")'],
        }),
      1,
    );
    pstep('python grab+read');
    peers.screenshotPngPythonPilPlusRead = await time(
      Math.max(3, Math.floor(o.runs / 3)),
      async () => {
        await c.exec(s.id, { argv: ['python3', '-c', 'from PIL import ImageGrab; ImageGrab.grab().save("/tmp/s.png")'] });
        await c.readFile(s.id, '/tmp/s.png');
      },
      1,
    );
    results.peers = peers;
    const p50 = (x: unknown) => (x as { p50: number }).p50;
    results.ratios = {
      clickPeersOverApi: +(p50(peers.clickXdotool) / p50(api.clickRoundTrip)).toFixed(1),
      type100PeersOverApi: +(p50(peers.type100Xdotool) / p50(api.type100Ascii)).toFixed(1),
      screenshotPngPeersOverApi: +(p50(peers.screenshotPngPythonPilPlusRead) / p50(api.screenshotPng)).toFixed(1),
    };
  } finally {
    await c.destroySession(s.id).catch(() => {});
  }

  // N sessions driven at once: each loop = one click + a JPEG q80 screenshot in one request.
  o.progress(`parallel: creating ${o.sessions} sessions`);
  const many: SessionInfo[] = [];
  try {
    const createT0 = performance.now();
    const made = await Promise.allSettled(Array.from({ length: o.sessions }, () => c.createSession({ image: 'minimal', screen: '1280x800' })));
    for (const m of made) if (m.status === 'fulfilled') many.push(m.value);
    const createMs = performance.now() - createT0;
    const lat: number[] = [];
    let steps = 0,
      errors = 0;
    const end = performance.now() + o.parallelSeconds * 1000;
    o.progress(`parallel: driving ${many.length} sessions for ${o.parallelSeconds} s`);
    const t0 = performance.now();
    await Promise.all(
      many.map(async (s, i) => {
        let k = 0;
        while (performance.now() < end) {
          const t = performance.now();
          try {
            await c.act(s.id, {
              actions: [{ type: 'click', x: 100 + ((k++ * 37 + i) % 1000), y: 100 + (k % 600) }],
              screenshot: { format: 'jpeg', quality: 80 },
            });
            steps++;
            lat.push(performance.now() - t);
          } catch {
            errors++;
          }
        }
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    results.parallel = {
      sessionsRequested: o.sessions,
      sessionsDriven: many.length,
      createFailures: o.sessions - many.length,
      createAllMs: Math.round(createMs),
      seconds: +wall.toFixed(2),
      steps,
      errors,
      stepsPerSecond: +(steps / wall).toFixed(1),
      stepLatency: round(summary(lat)),
      image: 'minimal',
      step: 'POST /actions: one click + JPEG q80 screenshot of 1280x800',
    };
  } finally {
    for (const s of many) await c.destroySession(s.id).catch(() => {});
  }

  // The observe/act bars (frozen in bench/bars/observe-act.json) are judged on client wall time.
  const { bars, sha256 } = loadBars('observe-act');
  const api = (results.api ?? {}) as Record<string, { p50: number } | undefined>;
  const metricOf: Record<string, string> = {
    'screenshot_png_ms.p50': 'screenshotPng',
    'screenshot_jpeg_q80_ms.p50': 'screenshotJpegQ80',
    'screenshot_raw_ms.p50': 'screenshotRaw',
    'click_ms.p50': 'clickRoundTrip',
    'action_screenshot_ms.p50': 'actionPlusScreenshotPng',
    'type_100_chars_ms.p50': 'type100Ascii',
    'a11y_tree_ms.p50': 'a11yChromiumForm',
    'exec_true_ms.p50': 'execTrue',
  };
  const verdicts = Object.fromEntries(
    bars.bars.map((b) => {
      const value = api[metricOf[b.metric] ?? '']?.p50;
      const pass = judge(b, value);
      return [b.id, { metric: b.metric, value: value ?? null, bar: `${b.op} ${b.value} ${b.unit}`, ...(pass === null ? {} : { pass }) }];
    }),
  );
  const g = gitState();
  const record = {
    schemaVersion: 1,
    experiment: 'ops',
    commit: g.commit,
    dirty: g.dirty,
    barsFile: { path: 'bench/bars/observe-act.json', sha256, fixedAt: bars.fixedAt, fixedCommit: bars.fixedCommit },
    bars: verdicts,
    mode: o.quick ? 'quick' : 'full',
    started,
    finished: new Date().toISOString(),
    host: hostFacts(),
    config: { runs: o.runs, sessions: o.sessions, parallelSeconds: o.parallelSeconds, screen: '1280x800', page: FORM },
    results,
    notes: [
      'latencies are client wall time through the HTTP API on 127.0.0.1 (ms), sequential, after 1-2 warm-up calls; bars are judged on them',
      "screenshot*Server = the daemon's capture + encode time from the Server-Timing header, apart from the HTTP transfer (a raw 1280x800 frame is 3 MB)",
      'peers = the same operation by spawning a tool inside the session through POST /exec (runc exec per call): xdotool for input, python3 PIL ImageGrab for screenshots (+ reading the file back through /files)',
      'parallel sessions use the minimal image (no Chromium) to bound memory; the daemon, client and sessions share the host CPUs',
    ],
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `ops-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
