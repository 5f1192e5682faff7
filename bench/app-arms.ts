import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import type { Arm, ArmHooks } from './arm.ts';
import { sleep } from './measure.ts';

/**
 * The OSWorld app arms: an osworld-image session with one desktop app open on a file of its kind
 * instead of Chromium (LibreOffice Calc with a sheet, Writer with a document, Impress with a deck,
 * GIMP with an image, VLC paused on a video, Thunderbird with a profile). "Browser ready" for these
 * arms is "app ready": the app's window shows the file (its title names it). The files are made
 * once per run: the sheet, document, deck and image on the host with the libraries OSWorld's task
 * authors use (app-files.py), the video by the image's ffmpeg in a scratch session. They are
 * written into each session after create and after reset (counted in the latency, like the app start).
 */

interface AppDef {
  arm: string;
  what: string;
  /** The file the app opens, in /home/user (made by FIXTURE_SCRIPT). */
  file?: string;
  /** Shell command that starts the app detached (FILE = the file's path). */
  start: string;
  /** The app's window once it shows the file. */
  window: RegExp;
}

const HOME = '/home/user';

const APPS: AppDef[] = [
  {
    arm: 'osworld-calc',
    what: 'LibreOffice Calc with a sheet (bench.xlsx, 200 rows of numbers and a SUM column)',
    file: 'bench.xlsx',
    start: 'libreoffice --calc "$FILE"',
    window: /^bench\.xlsx - LibreOffice Calc$/,
  },
  {
    arm: 'osworld-writer',
    what: 'LibreOffice Writer with a document (bench.docx, a heading and 60 paragraphs)',
    file: 'bench.docx',
    start: 'libreoffice --writer "$FILE"',
    window: /^bench\.docx - LibreOffice Writer$/,
  },
  {
    arm: 'osworld-impress',
    what: 'LibreOffice Impress with a deck (bench.pptx, 10 slides)',
    file: 'bench.pptx',
    start: 'libreoffice --impress "$FILE"',
    window: /^bench\.pptx - LibreOffice Impress$/,
  },
  { arm: 'osworld-gimp', what: 'GIMP 2.10 with an image (bench.png, 1280x800)', file: 'bench.png', start: 'gimp "$FILE"', window: /\[bench\].*GIMP/ },
  {
    arm: 'osworld-vlc',
    what: 'VLC 3.0 paused on a video (bench.mp4, 30 s 1280x720 H.264), web interface on',
    file: 'bench.mp4',
    start: 'VLC_VERBOSE=-1 vlc --no-audio --start-paused "$FILE"',
    window: /^bench\.mp4 - VLC media player$/,
  },
  {
    arm: 'osworld-thunderbird',
    what: 'Thunderbird with a profile (a fresh default profile, made at first start)',
    start: 'thunderbird',
    window: /Thunderbird/,
  },
];

/** The sheet, document, deck and image: made on the host by the task authors' libraries (openpyxl, python-docx, python-pptx, Pillow, from sdk/python/osworld-deps.txt). */
const APP_FILES_PY = fileURLToPath(new URL('./app-files.py', import.meta.url));
const PYTHON = process.env.DRUMS_PYTHON ?? fileURLToPath(new URL('../.runtime/venv/bin/python', import.meta.url));

/** The video, made in a scratch osworld session by the image's ffmpeg (the host has none). */
const VIDEO_SCRIPT = String.raw`set -e
d=$(mktemp -d); cd "$d"
ffmpeg -loglevel error -f lavfi -i testsrc=duration=30:size=1280x720:rate=25 -pix_fmt yuv420p -c:v libx264 -preset ultrafast bench.mp4
test -s bench.mp4
echo "$d"`;

let fixtures: Map<string, Buffer> | undefined;

async function makeFixtures(c: DrumsClient): Promise<Map<string, Buffer>> {
  if (fixtures) return fixtures;
  const out = new Map<string, Buffer>();
  const dir = mkdtempSync(join(tmpdir(), 'drums-app-files-'));
  try {
    const r = spawnSync(PYTHON, [APP_FILES_PY, dir], { encoding: 'utf8', timeout: 120_000 });
    if (r.status !== 0)
      throw new Error(
        `making the app arms' files with ${PYTHON} failed (its packages come from scripts/osworld-deps.sh, which scripts/up.sh and scripts/test.sh run): ${(r.stderr || String(r.error)).trim().slice(-500)}`,
      );
    for (const a of APPS) if (a.file && a.file !== 'bench.mp4') out.set(a.file, readFileSync(join(dir, a.file)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const s = await c.createSession({ image: 'osworld', screen: '1280x800' } as never);
  try {
    const r = await c.exec(s.id, { shell: VIDEO_SCRIPT, timeoutMs: 300_000 });
    if (r.exitCode !== 0) throw new Error(`making the VLC arm's video failed: ${r.stderr.trim().slice(-500)}`);
    out.set('bench.mp4', await c.readFile(s.id, `${r.stdout.trim().split('\n').at(-1)!}/bench.mp4`));
  } finally {
    await c.destroySession(s.id).catch(() => {});
  }
  fixtures = out;
  return out;
}

const WHY_NO_WINDOW = String.raw`echo "processes:"; ps -eo pid,stat,etime,wchan:24,comm --sort=start_time | tail -n 12
echo "X top-level windows:"; DISPLAY=:0 xwininfo -root -children 2>&1 | grep -c '^ *0x'
echo "load: $(cat /proc/loadavg)"`;

async function openApp(c: DrumsClient, s: SessionInfo, a: AppDef): Promise<void> {
  const path = a.file ? `${HOME}/${a.file}` : '';
  if (a.file) {
    const data = (await makeFixtures(c)).get(a.file)!;
    await c.writeFile(s.id, path, data);
  }
  const r = await c.exec(s.id, { shell: `setsid -f sh -c '${a.start}' >/dev/null 2>&1 </dev/null`, env: { FILE: path }, timeoutMs: 30_000 });
  if (r.exitCode !== 0) throw new Error(`${a.arm}: starting the app failed in ${s.id}: ${r.stderr.trim().slice(-300)}`);
  const deadline = performance.now() + 180_000;
  for (;;) {
    const v = await c.windows(s.id);
    if (v.windows.some((w) => a.window.test(w.title))) return;
    if (performance.now() > deadline) {
      // What the session was doing, so a miss in a record can be told apart (app gone, app alive without a window, window unmanaged).
      const why = await c
        .exec(s.id, { shell: WHY_NO_WINDOW, timeoutMs: 20_000 })
        .then((x) => x.stdout.trim().slice(-1500))
        .catch((e: Error) => `(diagnostics failed: ${e.message})`);
      throw new Error(`${a.arm}: no window matching ${a.window} in ${s.id} within 180 s (windows: ${v.windows.map((w) => w.title).join('; ')}); ${why}`);
    }
    await sleep(100);
  }
}

/** One app arm per app; `step` is the baseline's click + PNG screenshot. */
export function appArms(base: Pick<Arm, 'step' | 'stepNote' | 'isolation'>, imageBuilt: (name: string) => string | null): Arm[] {
  return APPS.map((a): Arm => {
    const hooks: ArmHooks = {
      async enter(ctx) {
        if (a.file) await makeFixtures(ctx.c);
      },
    };
    return {
      name: a.arm,
      description: `a Drums session on the osworld image (1920x1080) with ${a.what} open instead of Chromium, and its host-side OSWorld endpoint. Its "browser ready" latencies are app ready: the app's window shows the file`,
      image: 'osworld',
      unavailable: () => imageBuilt('osworld'),
      spec: () => ({ image: 'osworld' }),
      async afterStart(c, s, url) {
        if (url) await openApp(c, s, a);
      },
      step: base.step,
      stepNote: base.stepNote,
      hooks,
      isolation: { kind: 'as-baseline', why: 'osworld-image sessions with another app open: the same session core and policy as the baseline' },
    };
  });
}
