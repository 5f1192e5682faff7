import { existsSync, readFileSync } from 'node:fs';
import type { DrumsClient, SessionInfo } from '../client/client.ts';
import { listImages } from '../image/index.ts';

/**
 * Arms: session configurations an experiment compares. Each arm says how to
 * create its sessions, what one agent "step" is for it, and whether it can run
 * on this host (a reason to skip it otherwise).
 */
export interface ArmOptions {
  osworldSrc?: string;
}

export interface Arm {
  name: string;
  description: string;
  image: string;
  /** Set when the arm trades isolation or safety for its savings. */
  unsafe?: string;
  /** Why the arm cannot run here (null = runnable). */
  unavailable(o: ArmOptions): string | null;
  /** Extra fields of the create spec (browser = open Chromium on `url`). */
  spec(url?: string): Record<string, unknown>;
  /** Runs after a create or reset returns (the peer stack starts its VNC server here). Counted in create/reset latency. */
  afterStart?(c: DrumsClient, s: SessionInfo): Promise<void>;
  /** One agent step: act + observe. */
  step(c: DrumsClient, s: SessionInfo): Promise<void>;
  /** What one step is, for the record. */
  stepNote: string;
}

const imageBuilt = (name: string): string | null => {
  try {
    return listImages().some((i) => i.name === name && i.current) ? null : `image '${name}' is not built; run 'drums image build ${name}'`;
  } catch (e) {
    return `cannot list images: ${(e as Error).message}`;
  }
};

let actionsRoute: boolean | undefined;
/** Drums step: one click through POST /actions with a PNG screenshot in the same call (falls back to GET screenshot if the route is absent). */
async function drumsStep(c: DrumsClient, s: SessionInfo): Promise<void> {
  if (actionsRoute !== false) {
    try {
      const r = await c.request('POST', `/v1/sessions/${s.id}/actions`, { actions: [{ type: 'click', x: 5, y: 5 }], screenshot: { format: 'png' } });
      await r.arrayBuffer();
      actionsRoute = true;
      return;
    } catch (e) {
      if ((e as { status?: number }).status !== 404 || actionsRoute === true) throw e;
      actionsRoute = false;
    }
  }
  await c.screenshot(s.id, 'png');
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

/** The peer stack: x11vnc on the session display, websockify serving noVNC; actions and screenshots by spawning xdotool and import. */
const PEER_START = [
  'setsid x11vnc -display :0 -forever -shared -nopw -localhost -rfbport 5900 -quiet -noxdamage >/tmp/x11vnc.log 2>&1 < /dev/null &',
  'setsid websockify --web /usr/share/novnc 6080 127.0.0.1:5900 >/tmp/websockify.log 2>&1 < /dev/null &',
  'for i in $(seq 200); do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 5900), 0.2).close(); socket.create_connection((\'127.0.0.1\', 6080), 0.2).close()" 2>/dev/null && exit 0; sleep 0.05; done',
  'echo "peer stack did not listen on 5900/6080" >&2; cat /tmp/x11vnc.log /tmp/websockify.log >&2; exit 1',
].join('\n');

const peerVnc: Arm = {
  name: 'peer-vnc',
  description: 'the usual peer stack on the same session core: default image + x11vnc + websockify/noVNC; actions and screenshots by spawning xdotool and ImageMagick import inside the session',
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
  if (!existsSync('/sys/block/zram0') && !existsSync('/sys/class/zram-control')) return 'no zram device or zram-control on this host (modprobe zram)';
  return null;
};

const notBuilt = (what: string) => (): string | null => `not implemented in this iteration: ${what}`;

const zramIdle: Arm = {
  name: 'zram-idle',
  description: 'baseline sessions whose idle memory is pushed to a zram swap device through per-session cgroup limits / force-reclaim (no cross-session sharing)',
  image: 'default',
  unavailable: () => zramAvailable() ?? notBuilt('per-session reclaim into zram and wake-up latency (see docs/bench.md, "not done")')(),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
};

const ksm = (aslr: boolean): Arm => ({
  name: aslr ? 'ksm-aslr-on' : 'ksm-aslr-off',
  description: `baseline sessions with prctl(PR_SET_MEMORY_MERGE) in the session init and ksmd running; kernel.randomize_va_space ${aslr ? 'left on' : 'set to 0'}`,
  image: 'default',
  ...(aslr ? {} : { unsafe: 'ASLR off host-wide: weakens every process on the host; measurement only' }),
  unavailable: () => (existsSync('/sys/kernel/mm/ksm/run') ? notBuilt('the PR_SET_MEMORY_MERGE hook in guest/session-init and the ksm knob save/restore')() : 'kernel has no KSM (/sys/kernel/mm/ksm missing)'),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
});

const sharedBrowser: Arm = {
  name: 'shared-browser',
  description: 'one host Chromium with a profile per session, served into sessions (isolation is expected to FAIL; the audit probe `shared-browser.cross-profile` documents why)',
  image: 'default',
  unsafe: 'one browser process tree serves every session: a renderer or browser compromise reaches all sessions',
  unavailable: notBuilt('memory of the shared browser; only its isolation probe is implemented (drums audit --arms shared-browser)'),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
};

const seedGuest: Arm = {
  name: 'seed-guest-server',
  description: 'an OSWorld-style guest server seeded inside the session (needs --osworld-src)',
  image: 'default',
  unavailable: (o) => (o.osworldSrc ? notBuilt('seeding the OSWorld guest server') () : 'needs --osworld-src DIR (an OSWorld checkout); not given'),
  spec: baseline.spec,
  step: drumsStep,
  stepNote: baseline.stepNote,
};

export const ARMS: Record<string, Arm> = Object.fromEntries(
  [baseline, peerVnc, zramIdle, ksm(true), ksm(false), sharedBrowser, seedGuest].map((a) => [a.name, a]),
);

export function getArm(name: string): Arm {
  const a = ARMS[name];
  if (!a) throw new Error(`unknown arm '${name}'; arms: ${Object.keys(ARMS).join(', ')}`);
  return a;
}

void readFileSync;
