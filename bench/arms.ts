import { existsSync } from 'node:fs';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { listImages } from '../src/image/index.ts';
import { KSM_SETTINGS, ksmHooks, zramHooks } from './memory-arms.ts';
import { PROBE_ID, sharedBrowser, sharedBrowserUnavailable } from './shared-browser.ts';
import { seedGuestArm } from './seed-guest.ts';
import { appArms } from './app-arms.ts';
import type { Arm } from './arm.ts';

/** The arm registry: every arm an experiment can name, by name (the Arm types are in arm.ts). */

const imageBuilt = (name: string): string | null => {
  try {
    return listImages().some((i) => i.name === name && i.current) ? null : `image '${name}' is not built; run 'drums image build ${name}'`;
  } catch (e) {
    return `cannot list images: ${(e as Error).message}`;
  }
};

/** Drums step: one click through POST /actions with a PNG screenshot in the same call. */
async function drumsStep(c: DrumsClient, s: SessionInfo): Promise<void> {
  const r = await c.request('POST', `/v1/sessions/${s.id}/actions`, { actions: [{ type: 'click', x: 5, y: 5 }], screenshot: { format: 'png' } });
  await r.arrayBuffer();
}

const baseline: Arm = {
  name: 'baseline',
  description: 'the default Drums session: default image, Xvfb + openbox + D-Bus + AT-SPI, one Chromium (the session-init flag set)',
  image: 'default',
  unavailable: () => imageBuilt('default'),
  spec: (url) => ({ image: 'default', ...(url ? { url } : {}) }),
  step: drumsStep,
  stepNote: 'POST /v1/sessions/:id/actions (one click) with a PNG screenshot in the response',
};

const osworldImage: Arm = {
  name: 'osworld',
  description:
    'a Drums session on the osworld image (default + what OSWorld tasks assume; 1920x1080 screen, its default) with Chromium open, and the host-side OSWorld guest endpoint the daemon serves for it: what one more OSWorld environment costs',
  image: 'osworld',
  unavailable: () => imageBuilt('osworld'),
  spec: (url) => ({ image: 'osworld', ...(url ? { url } : {}) }),
  step: drumsStep,
  stepNote: baseline.stepNote,
  isolation: {
    kind: 'as-baseline',
    why: "the same session core and policy as the baseline; the image adds packages, and the host-side guest endpoint on 127.0.0.1 refuses local users other than the daemon's (peer uid check, tests/integration/osworld-contract.test.ts)",
  },
};

/**
 * Recording (docs/episodes.md): the baseline session created with `record`, stepped the same way, so the
 * steps/s and latency next to the baseline's are the cost of recording (every step's event, its screenshot hashed,
 * and, with frames, the PNG kept).
 */
function recordArm(name: string, record: { frames?: number; a11y?: boolean }, what: string): Arm {
  return {
    name,
    description: `the baseline session recorded (spec record ${JSON.stringify(record)}): ${what}`,
    image: 'default',
    unavailable: () => imageBuilt('default'),
    spec: (url) => ({ image: 'default', record, ...(url ? { url } : {}) }),
    step: drumsStep,
    stepNote: baseline.stepNote,
    isolation: { kind: 'as-baseline', why: "the same session; its episode lives in the daemon's root-only state directory, which no session reaches" },
  };
}

/** The peer stack: x11vnc on the session display, websockify serving noVNC; actions and screenshots by spawning xdotool and import. */
const PEER_START = [
  'setsid x11vnc -display :0 -forever -shared -nopw -localhost -rfbport 5900 -quiet -noxdamage >/tmp/x11vnc.log 2>&1 < /dev/null &',
  'setsid websockify --web /usr/share/novnc 6080 127.0.0.1:5900 >/tmp/websockify.log 2>&1 < /dev/null &',
  "for i in $(seq 200); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 5900), 0.2).close(); socket.create_connection(('127.0.0.1', 6080), 0.2).close()\" 2>/dev/null && exit 0; sleep 0.05; done",
  'echo "peer stack did not listen on 5900/6080" >&2; cat /tmp/x11vnc.log /tmp/websockify.log >&2; exit 1',
].join('\n');

const peerVnc: Arm = {
  name: 'peer-vnc',
  description:
    'the usual peer stack on the same session core: default image + x11vnc + websockify/noVNC; actions and screenshots by spawning xdotool and ImageMagick import inside the session',
  image: 'peer-vnc',
  unavailable: () => imageBuilt('peer-vnc'),
  spec: (url) => ({ image: 'peer-vnc', ...(url ? { url } : {}) }),
  async afterStart(c, s) {
    const r = await c.exec(s.id, { shell: PEER_START, timeoutMs: 30_000 });
    if (r.exitCode !== 0) throw new Error(`peer-vnc stack failed to start in ${s.id}: ${r.stderr.trim().slice(-400)}`);
  },
  async step(c, s) {
    const r = await c.exec(s.id, { shell: 'xdotool mousemove 5 5 click 1 && import -window root png:- | wc -c', timeoutMs: 30_000 });
    if (r.exitCode !== 0 || !(Number(r.stdout.trim()) > 1000)) throw new Error(`peer-vnc step failed in ${s.id}: ${r.stderr.trim().slice(-300)}`);
  },
  stepNote: 'exec of `xdotool mousemove 5 5 click 1 && import -window root png:-` inside the session (spawned per step, as peer stacks do)',
};

const zramAvailable = (): string | null => {
  if (!existsSync('/sys/class/zram-control/hot_add') && !existsSync('/sys/block/zram0'))
    return 'no zram on this host (no /sys/class/zram-control; modprobe zram)';
  if (!existsSync('/sys/class/zram-control/hot_add'))
    return 'zram is built without hot_add (/sys/class/zram-control missing): the arm only adds a device of its own, never reuses one';
  for (const tool of ['mkswap', 'swapon', 'swapoff']) if (!onPath(tool)) return `${tool} not found (util-linux)`;
  return null;
};

const onPath = (tool: string) =>
  (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin')
    .split(':')
    .concat(['/usr/sbin', '/sbin'])
    .some((d) => existsSync(`${d}/${tool}`));

/** The memory arms need root on the host (sysfs knobs, swapon, cgroup files). */
const needRoot = (): string | null => (process.getuid?.() === 0 ? null : 'needs root on the host (host knobs, cgroup files)');

const zramIdle: Arm = {
  name: 'zram-idle',
  description:
    "baseline sessions whose memory is pushed, at every reading, into a zram swap device (its own, added for the trial) through each session's own memory cgroup (v1: limit lowered then restored with swappiness 100; v2: memory.reclaim); then the first step after idle is timed. zram compresses page by page: no page is shared or deduplicated across sessions",
  image: 'default',
  unavailable: () => needRoot() ?? zramAvailable() ?? baseline.unavailable({}),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
  hooks: zramHooks(),
  isolation: {
    kind: 'as-baseline',
    why: 'zram-idle sessions are baseline sessions (same spec, same image); the arm adds host swap on a zram device, which stores each swapped page compressed in its own slot: no page is shared or deduplicated across sessions, so no cross-session page sharing. Host-wide totals (/proc/swaps, /proc/meminfo, /sys/block/zramN/mm_stat) are readable in a session, as host memory totals already are in the baseline',
  },
};

const ksm = (aslr: boolean): Arm => ({
  name: aslr ? 'ksm-aslr-on' : 'ksm-aslr-off',
  description: `baseline sessions whose init opts its whole process tree into KSM (prctl(PR_SET_MEMORY_MERGE) before exec, inherited by every desktop process; session label drums.bench.ksm=1, honoured only by a daemon with DRUMS_BENCH_HOOKS=1) with ksmd running (run=1, pages_to_scan=${KSM_SETTINGS.pages_to_scan}, sleep_millisecs=${KSM_SETTINGS.sleep_millisecs}) for the trial; kernel.randomize_va_space ${aslr ? 'left as is' : 'set to 0 host-wide for the trial'}; readings taken once merging settles`,
  image: 'default',
  ...(aslr ? {} : { unsafe: 'ASLR off host-wide (kernel.randomize_va_space=0) for the trial: weakens every process on the host; measurement only' }),
  tradeoff:
    "a saving bought with isolation: KSM merges identical pages across sessions, and a write to a merged page takes a copy-on-write fault, so one session can tell by timing which page contents another session holds (the run's probe ksm.cross-session-merge demonstrates it)",
  unavailable: () =>
    needRoot() ??
    (existsSync('/sys/kernel/mm/ksm/run')
      ? existsSync('/proc/self/ksm_stat')
        ? baseline.unavailable({})
        : 'kernel lacks per-process KSM (PR_SET_MEMORY_MERGE, /proc/PID/ksm_stat; Linux >= 6.4)'
      : 'kernel has no KSM (/sys/kernel/mm/ksm missing)'),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
  hooks: ksmHooks(aslr),
  isolation: {
    kind: 'fail-by-design',
    probe: 'ksm.cross-session-merge',
    why: 'KSM deduplicates pages across sessions; a merged page is a cross-session timing side channel (copy-on-write on write). FAIL by design',
  },
});

/** The session-side port of the shared browser's DevTools endpoint (each shared-browser session may reach its gateway on it). */
const SHARED_DEVTOOLS_PORT = 9222;
const shared = sharedBrowser(SHARED_DEVTOOLS_PORT);

const sharedBrowserArm: Arm = {
  name: 'shared-browser',
  description:
    "one Chromium on the host (same flags as a session's own, on a host Xvfb) with a browser context (profile) and one page per session; the sessions run the desktop only (Xvfb, openbox, buses). Tools in a session reach their browser through its DevTools endpoint, as OSWorld tasks do on port 9222",
  image: 'default',
  unsafe:
    "one browser process tree serves every session: a session that reaches the DevTools endpoint reads and drives every other session's pages, and a renderer or browser compromise reaches all sessions",
  tradeoff:
    "a saving bought with isolation: every session's pages live in one browser process and behind one DevTools endpoint (the run's probe shared-browser.cross-session-devtools shows session A reading and driving session B's page)",
  unavailable: () => sharedBrowserUnavailable() ?? baseline.unavailable({}),
  spec: () => ({ image: 'default', hostPorts: [SHARED_DEVTOOLS_PORT] }),
  afterStart: shared.afterStart,
  afterDestroy: shared.afterDestroy,
  step: shared.step,
  stepNote: "a click (5, 5) and a PNG screenshot of the session's page through the shared browser's DevTools protocol (Playwright over CDP)",
  hooks: shared.hooks,
  isolation: {
    kind: 'fail-by-design',
    probe: PROBE_ID,
    why: 'one browser serves every session: whoever reaches its DevTools endpoint reads and drives all pages. FAIL by design; the in-run probe and drums audit --arms shared-browser name the path',
  },
};

/** OSWorld's own guest server inside every session, from the checkout given with --osworld-src (bench/seed-guest.ts). */
const seedGuest: Arm = seedGuestArm(imageBuilt);

export const ARMS: Record<string, Arm> = Object.fromEntries(
  [
    baseline,
    peerVnc,
    zramIdle,
    ksm(true),
    ksm(false),
    sharedBrowserArm,
    seedGuest,
    osworldImage,
    recordArm('record-actions', {}, 'actions and observation hashes, no frames'),
    recordArm('record-2fps', { frames: 2 }, "frames kept at up to 2 per second besides each step's"),
    recordArm('record-10fps', { frames: 10 }, "frames kept at up to 10 per second besides each step's"),
    ...appArms(osworldImage, imageBuilt),
  ].map((a) => [a.name, a]),
);

export function getArm(name: string): Arm {
  const a = ARMS[name];
  if (!a) throw new Error(`unknown arm '${name}'; arms: ${Object.keys(ARMS).join(', ')}`);
  return a;
}
