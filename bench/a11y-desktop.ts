import type { DrumsClient } from '../src/client/client.ts';

/**
 * The 7-app OSWorld desktop of issue 30's tree-read measures, in one `osworld` session: LibreOffice Calc on a
 * sheet, GIMP on an image, Thunderbird, Chromium on a page, nautilus on a folder, gedit on a text and evince on
 * a PDF. Used by the profiling script (tests/fixtures/a11y/profile.ts), the a11y bench and the fast-read test.
 */
export type DesktopApp = { name: string; bin: string; launch: string; window: RegExp };

export const DESKTOP_APPS: DesktopApp[] = [
  { name: 'calc', bin: 'soffice', launch: 'xdg-open ~/calc.xlsx', window: /^calc\.xlsx - LibreOffice Calc$/ },
  { name: 'gimp', bin: 'gimp', launch: 'gimp ~/pic.png', window: /^\[pic\] \(imported\)-1\.0 .* – GIMP$/ },
  { name: 'thunderbird', bin: 'thunderbird', launch: '/usr/bin/thunderbird', window: /Mozilla Thunderbird$/ },
  { name: 'chromium', bin: 'google-chrome', launch: 'google-chrome --remote-debugging-port=1337 ~/page.html', window: /^Drums page - Chromium$/ },
  { name: 'nautilus', bin: 'nautilus', launch: 'nautilus ~/Documents', window: /^Documents$/ },
  { name: 'gedit', bin: 'gedit', launch: 'xdg-open ~/notes.txt', window: /^notes\.txt \(~\) - gedit$/ },
  { name: 'evince', bin: 'evince', launch: 'xdg-open ~/doc.pdf', window: /^doc\.pdf — Doc Title$/ },
];

/** The files the apps open, made in the session (LibreOffice converts the CSV). */
const MAKE_FILES = String.raw`set -e; cd ~
printf 'name,score\nada,3\nbob,5\n' > calc.csv; echo hello > notes.txt
printf '<title>Drums page</title><h1>Sign up</h1><label>Name <input value=Ada></label><button>Send</button>' > page.html
python3 -c "
import fitz; d = fitz.open(); p = d.new_page(); p.insert_text((72, 72), 'Page one'); d.set_metadata({'title': 'Doc Title'}); d.save('doc.pdf')
from PIL import Image; Image.new('RGB', (320, 200), (9, 99, 199)).save('pic.png')"
soffice --headless --convert-to xlsx calc.csv >/dev/null 2>&1
for f in doc.pdf pic.png calc.xlsx; do test -s $f || { echo "no $f"; exit 1; }; done`;

/** Apps of `names` (default all seven) the image lacks. */
export async function missingApps(c: DrumsClient, id: string, names = DESKTOP_APPS.map((a) => a.name)): Promise<string[]> {
  const apps = DESKTOP_APPS.filter((a) => names.includes(a.name));
  const r = await c.exec(id, { shell: `for b in ${apps.map((a) => a.bin).join(' ')}; do command -v $b >/dev/null || echo $b; done`, timeoutMs: 30_000 });
  const absent = r.stdout.split('\n');
  return apps.filter((a) => absent.includes(a.bin)).map((a) => a.name);
}

/**
 * Makes the files, starts the apps of `names` (default all) and waits until each shows its window, then `settleMs`
 * for their start-up to finish. Throws naming the apps without a window after `timeoutMs`.
 */
export async function openDesktop(c: DrumsClient, id: string, o: { names?: string[]; timeoutMs?: number; settleMs?: number } = {}): Promise<void> {
  const apps = DESKTOP_APPS.filter((a) => (o.names ?? DESKTOP_APPS.map((x) => x.name)).includes(a.name));
  const sh = async (shell: string, timeoutMs = 120_000) => {
    const r = await c.exec(id, { shell, timeoutMs });
    if (r.exitCode !== 0) throw new Error(`${shell}: exit ${r.exitCode}\n${r.stdout}\n${r.stderr}`);
  };
  await sh(MAKE_FILES, 300_000);
  for (const a of apps) await sh(`setsid -f sh -c '${a.launch}' >/dev/null 2>&1 </dev/null`);
  const deadline = Date.now() + (o.timeoutMs ?? 240_000);
  for (;;) {
    const ws = (await c.windows(id)).windows as Array<{ title: string }>;
    const late = apps.filter((a) => !ws.some((w) => a.window.test(w.title)));
    if (late.length === 0) break;
    if (Date.now() > deadline) throw new Error(`no window for ${late.map((a) => a.name).join(', ')}; windows: ${ws.map((w) => w.title).join(' | ')}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  await new Promise((r) => setTimeout(r, o.settleMs ?? 5000));
}
