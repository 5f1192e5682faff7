/**
 * `drums bench frame-profile`: where each millisecond of a step goes, per screen size.
 *
 * A private daemon of this checkout, one Chromium session per screen size (the steps bench's
 * ticking page), driven one request at a time (no queueing: the stages, not the fair share):
 * - `step.png` / `step.jpeg`: POST /actions {click, screenshot} as the binary response, the way
 *   the steps bench and the clients step. The daemon's Server-Timing names its stages: actions,
 *   then the frame's cursor round trip, grab (ShmGetImage + the copy out of the segment), draw
 *   (pointer), colour (BGRX → RGB: the banded PNG's filter pass), encode; `http` is the client's
 *   wall time less all of the daemon's (request and response through Hono, undici and the
 *   loopback, the body's transfer, the client's own parse);
 * - `full.png`: GET /screenshot PNGs that encode the whole frame: regions cycled over more
 *   option sets than the daemon keeps encoders or cached frames for, so every one is a cold
 *   full-frame banded encode (a new page, a scroll, a dialog);
 * - `encoders` (when the caller gives `compare`): one captured frame encoded by the candidate
 *   encoders in this process (CPU time and wall, sizes, exactness), e.g. the banded encoder
 *   whole, and libvips at several settings.
 */
import { writeFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { quantile } from './stats.ts';

const PAGE =
  'data:text/html,' +
  encodeURIComponent(
    '<!doctype html><title>tick</title><body style="margin:0;font:48px sans-serif;background:#fafafa"><div id=t style="padding:40px"></div><p style="padding:40px;font-size:20px">Drums steps bench: a page whose clock ticks once a second.</p><script>setInterval(()=>t.textContent=new Date().toISOString(),1000)</script>',
  );

export interface EncoderRow {
  name: string;
  /** On the event loop (synchronous) or on libuv's pool. */
  where: 'event loop' | 'libuv pool' | 'worker';
  wallMs: number;
  cpuMs: number;
  bytes: number;
  exact: boolean;
}

export interface FrameProfileOptions {
  screens: string[];
  steps: number;
  outDir: string;
  command: string;
  progress: (m: string) => void;
  /** Encodes one BGRX frame with each candidate encoder (the CLI passes the display layer's). */
  compare?: (bgrx: Buffer, width: number, height: number, rounds: number) => Promise<EncoderRow[]>;
}

const STAGES = ['actions', 'capture', 'cursor', 'grab', 'draw', 'colour', 'encode'] as const;

function parseTiming(h: string | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of (h ?? '').matchAll(/(\w+);dur=([\d.]+)/g)) out[m[1]!] = Number(m[2]);
  const b = /bands;desc="(\d+)\/(\d+)"/.exec(h ?? '');
  if (b) out.bandsChanged = Number(b[1]);
  return out;
}

const r2 = (x: number) => Math.round(x * 100) / 100;
function stats(xs: number[]) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return { n: s.length, p50: r2(quantile(s, 0.5)), p95: r2(quantile(s, 0.95)), mean: r2(s.reduce((a, b) => a + b, 0) / s.length) };
}

export async function runFrameProfile(o: FrameProfileOptions): Promise<{ record: Record<string, unknown>; file: string }> {
  const started = new Date().toISOString();
  const loadBefore = readFileSync('/proc/loadavg', 'utf8').trim();
  const d = await startPrivateDaemon();
  const auth = { authorization: `Bearer ${d.token}` };
  const perScreen: Record<string, unknown> = {};
  try {
    for (const screen of o.screens) {
      const [w, h] = screen.split('x').map(Number) as [number, number];
      o.progress(`${screen}: creating a Chromium session`);
      const s = await d.client.createSession({ image: 'default', url: PAGE, screen, diskMb: 128 });
      try {
        const steps: Record<string, Record<string, number[]>> = {};
        for (const format of ['png', 'jpeg'] as const) {
          o.progress(`${screen}: ${o.steps} ${format} steps`);
          const acc: Record<string, number[]> = {};
          for (let n = -5; n < o.steps; n++) {
            const t = performance.now();
            const res = await fetch(`${d.url}/v1/sessions/${s.id}/actions`, {
              method: 'POST',
              headers: { ...auth, 'content-type': 'application/json', accept: `image/${format}` },
              body: JSON.stringify({
                actions: [{ type: 'click', x: 200 + ((n * 37) % 900), y: 300 + ((n * 13) % 400) }],
                screenshot: { format, ...(format === 'jpeg' ? { quality: 80 } : {}) },
              }),
            });
            const body = Buffer.from(await res.arrayBuffer());
            const total = performance.now() - t;
            if (!res.ok) throw new Error(`step: ${res.status} ${body.toString().slice(0, 200)}`);
            if (n < 0) continue; // warm-up
            const st = parseTiming(res.headers.get('server-timing'));
            (acc.total ??= []).push(total);
            for (const k of [...STAGES, 'bandsChanged']) if (st[k] !== undefined) (acc[k] ??= []).push(st[k]!);
            (acc.http ??= []).push(total - (st.actions ?? 0) - (st.capture ?? 0));
            (acc.bytes ??= []).push(body.length);
          }
          steps[format] = acc;
        }
        // Cold full-frame PNGs: 6 regions (more than the daemon's 4 cached frames and 2 encoders per session).
        o.progress(`${screen}: ${o.steps} full-frame PNGs`);
        const full: Record<string, number[]> = {};
        for (let n = 0; n < o.steps; n++) {
          const region = `0,0,${w},${h - (n % 6)}`;
          const t = performance.now();
          const res = await fetch(`${d.url}/v1/sessions/${s.id}/screenshot?format=png&region=${region}`, { headers: auth });
          const body = Buffer.from(await res.arrayBuffer());
          const total = performance.now() - t;
          if (!res.ok) throw new Error(`screenshot: ${res.status} ${body.toString().slice(0, 200)}`);
          const st = parseTiming(res.headers.get('server-timing'));
          if (st.encode === undefined) continue; // a reused frame: not cold
          (full.total ??= []).push(total);
          for (const k of [...STAGES, 'bandsChanged']) if (st[k] !== undefined) (full[k] ??= []).push(st[k]!);
          (full.http ??= []).push(total - (st.capture ?? 0));
          (full.bytes ??= []).push(body.length);
        }
        let encoders: EncoderRow[] | undefined;
        if (o.compare) {
          o.progress(`${screen}: encoders on one frame`);
          const raw = await d.client.screenshotEx(s.id, { format: 'raw' });
          const bgrx = Buffer.alloc(w * h * 4 + 4);
          for (let i = 0, j = 0; i < w * h; i++, j += 3) {
            bgrx[i * 4] = raw.data[j + 2]!;
            bgrx[i * 4 + 1] = raw.data[j + 1]!;
            bgrx[i * 4 + 2] = raw.data[j]!;
          }
          encoders = await o.compare(bgrx, w, h, Math.max(5, Math.round(o.steps / 10)));
        }
        const sum = (acc: Record<string, number[]>) => Object.fromEntries(Object.entries(acc).map(([k, v]) => [k, stats(v)]));
        perScreen[screen] = {
          step: Object.fromEntries(Object.entries(steps).map(([f, acc]) => [f, sum(acc)])),
          fullFramePng: sum(full),
          ...(encoders ? { encoders } : {}),
        };
      } finally {
        await d.client.destroySession(s.id).catch(() => {});
      }
    }
  } finally {
    await d.stop();
  }
  const g = gitState();
  const record = {
    kind: 'drums-frame-profile',
    description:
      'Where each millisecond of a step goes (capture, colour, cursor, encode, HTTP), per screen size; cold full-frame PNG encodes; candidate encoders on one frame.',
    command: o.command,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    host: { ...hostFacts(), loadavgBefore: loadBefore, loadavgAfter: readFileSync('/proc/loadavg', 'utf8').trim() },
    method: {
      driving: 'one request at a time (no queueing), a Chromium session per screen on a page whose clock ticks every second; 5 warm-up steps per format',
      stages:
        "the daemon's Server-Timing (ms, wall): actions = the XTEST batch; capture = the whole frame in the daemon, of which cursor = XFixesGetCursorImage round trip, grab = ShmGetImage round trip + pread out of the segment (only the changed bands' rows for a banded PNG), draw = the pointer drawn onto BGRX, colour = BGRX → RGB (banded PNG: the filter pass with its Adler-32, in JS; else swap32), encode = deflate of the changed bands (banded PNG) or libvips' whole encode on libuv's pool (JPEG: a wait, not event-loop time); http = client wall − actions − capture",
      fullFramePng:
        'GET /screenshot?format=png with regions 0,0,W,H-k for k = 0..5 in turn: more option sets than the daemon keeps cached frames (4) or banded encoders (2) per session, so each is a whole-frame encode; reused frames (none expected) are dropped',
      encoders:
        'one frame (GET ?format=raw, turned back into BGRX) encoded in the bench process by each candidate, median of the rounds; exact = decodes (sharp) to the same RGB bytes',
    },
    config: { screens: o.screens, steps: o.steps },
    screens: perScreen,
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `frame-profile-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
