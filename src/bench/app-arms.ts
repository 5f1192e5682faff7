import type { DrumsClient, SessionInfo } from '../client/client.ts';
import type { Arm, ArmHooks } from './arm.ts';
import { sleep } from './measure.ts';

/**
 * The OSWorld app arms: an osworld-image session with one desktop app open on a file of its kind
 * instead of Chromium (LibreOffice Calc with a sheet, Writer with a document, Impress with a deck,
 * GIMP with an image, VLC paused on a video, Thunderbird with a profile). "Browser ready" for these
 * arms is "app ready": the app's window shows the file (its title names it). The files are made
 * once per run in a scratch session, with the image's own tools, and written into each session
 * after create and after reset (counted in the latency, like the app start).
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

/** Runs in a scratch osworld session: the files every app arm opens, made by the apps' own tools. */
const FIXTURE_SCRIPT = String.raw`set -e
d=$(mktemp -d); cd "$d"
{ echo 'a,b,sum'; for i in $(seq 1 200); do echo "$i,$((i*7%13)),=A$((i+1))+B$((i+1))"; done; } > bench.csv
{ echo '<html><body><h1>Drums bench</h1>'; for i in $(seq 1 60); do echo "<p>Paragraph $i: the quick brown fox jumps over the lazy dog, again and again, for the benchmark.</p>"; done; echo '</body></html>'; } > bench.html
cat > bench.fodp <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.presentation">
<office:body><office:presentation>
EOF
for i in $(seq 1 10); do echo "<draw:page draw:name=\"s$i\"><draw:frame svg:x=\"2cm\" svg:y=\"2cm\" svg:width=\"20cm\" svg:height=\"3cm\"><draw:text-box><text:p>Slide $i</text:p></draw:text-box></draw:frame><draw:frame svg:x=\"2cm\" svg:y=\"6cm\" svg:width=\"20cm\" svg:height=\"8cm\"><draw:text-box><text:p>Point one of slide $i</text:p><text:p>Point two of slide $i</text:p></draw:text-box></draw:frame></draw:page>" >> bench.fodp; done
echo '</office:presentation></office:body></office:document>' >> bench.fodp
soffice --headless --convert-to xlsx:"Calc MS Excel 2007 XML" bench.csv >/dev/null 2>&1
soffice --headless --infilter="HTML (StarWriter)" --convert-to docx:"MS Word 2007 XML" bench.html >/dev/null 2>&1
soffice --headless --convert-to pptx:"Impress MS PowerPoint 2007 XML" bench.fodp >/dev/null 2>&1
python3 -c "from PIL import Image, ImageDraw; im = Image.new('RGB', (1280, 800), (40, 90, 160)); ImageDraw.Draw(im).ellipse((300, 150, 980, 650), fill=(230, 180, 40)); im.save('bench.png')"
ffmpeg -loglevel error -f lavfi -i testsrc=duration=30:size=1280x720:rate=25 -pix_fmt yuv420p -c:v libx264 -preset ultrafast bench.mp4
for f in bench.xlsx bench.docx bench.pptx bench.png bench.mp4; do test -s "$f"; done
echo "$d"`;

let fixtures: Map<string, Buffer> | undefined;

async function makeFixtures(c: DrumsClient): Promise<Map<string, Buffer>> {
  if (fixtures) return fixtures;
  const s = await c.createSession({ image: 'osworld', screen: '1280x800' } as never);
  try {
    const r = await c.exec(s.id, { shell: FIXTURE_SCRIPT, timeoutMs: 300_000 });
    if (r.exitCode !== 0) throw new Error(`making the app arms' files failed: ${r.stderr.trim().slice(-500)}`);
    const dir = r.stdout.trim().split('\n').at(-1)!;
    const out = new Map<string, Buffer>();
    for (const a of APPS) if (a.file) out.set(a.file, await c.readFile(s.id, `${dir}/${a.file}`));
    fixtures = out;
    return out;
  } finally {
    await c.destroySession(s.id).catch(() => {});
  }
}

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
    if (performance.now() > deadline)
      throw new Error(`${a.arm}: no window matching ${a.window} in ${s.id} within 180 s (windows: ${v.windows.map((w) => w.title).join('; ')})`);
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
