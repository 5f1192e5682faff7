/**
 * Micro-benchmark of the display layer against the per-step subprocess approach.
 *
 *   node src/display/bench-display.ts [--iterations 40] [--socket /tmp/.X11-unix/X0]
 *
 * Without --socket it starts its own Xvfb 1280x800 + openbox + an xterm to type into.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { XDisplay } from './x-display.ts';
import { startXvfb, type XvfbHandle } from './xvfb-harness.ts';

export interface Stat { name: string; n: number; p50: number; p95: number; min: number }
export interface BenchResult { width: number; height: number; shm: boolean; stats: Stat[]; ratios: Record<string, number> }

function stat(name: string, samples: number[]): Stat {
  const s = samples.slice().sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { name, n: s.length, p50: q(0.5), p95: q(0.95), min: s[0] };
}

async function measure(n: number, warmup: number, fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'ignore'] });
    c.stdout!.resume();
    c.on('error', reject);
    c.on('exit', code => (code === 0 ? resolve() : reject(new Error(`${cmd} exited ${code}`))));
  });
}

export async function benchDisplay(opts: { socketPath?: string; displayEnv?: string; iterations?: number } = {}): Promise<BenchResult> {
  const n = opts.iterations ?? 40;
  let h: XvfbHandle | null = null;
  let socketPath = opts.socketPath;
  let env: NodeJS.ProcessEnv = { ...process.env, DISPLAY: opts.displayEnv };
  if (!socketPath) {
    h = await startXvfb({ windowManager: true, width: 1280, height: 800 });
    socketPath = h.socketPath;
    env = h.env;
  }
  const d = await XDisplay.open(socketPath, { timeoutMs: 10_000 });
  try {
    if (h) {
      h.spawnClient('xterm', ['-T', 'bench', '-geometry', '120x40+50+50', '-e', 'sh', '-c', 'ls -laR /usr/share/doc | head -200; cat > /dev/null']);
      const w = await d.waitForWindow(x => x.title === 'bench' && x.mapped && x.width > 100, { timeoutMs: 10_000 });
      await d.activateWindow(w.id);
      await d.click({ x: w.x + 100, y: w.y + 100 });
      await new Promise(r => setTimeout(r, 500));
    }
    const stats: Stat[] = [];
    const warm = 10;
    stats.push(stat('screenshot png (L6)', await measure(n, warm, () => d.screenshot({ format: 'png' }))));
    stats.push(stat('screenshot jpeg q80', await measure(n, warm, () => d.screenshot({ format: 'jpeg', quality: 80 }))));
    stats.push(stat('screenshot webp e0', await measure(n, warm, () => d.screenshot({ format: 'webp' }))));
    stats.push(stat('screenshot raw', await measure(n, warm, () => d.screenshot({ format: 'raw' }))));
    stats.push(stat('click (round trip)', await measure(n * 5, warm, () => d.click({ x: 400, y: 300 }))));
    stats.push(stat('click + screenshot jpeg', await measure(n, warm, async () => { await d.click({ x: 400, y: 300 }); await d.screenshot({ format: 'jpeg' }); })));
    const text = 'The quick brown fox jumps over the lazy dog 0123456789 '.repeat(2).slice(0, 100);
    stats.push(stat('type 100 ASCII chars', await measure(n, 3, () => d.type(text))));
    // Subprocess baselines (what per-step xdotool / ImageMagick agents do).
    const m = Math.max(5, Math.floor(n / 4));
    stats.push(stat('spawn xdotool click', await measure(m, 2, () => run('xdotool', ['mousemove', '400', '300', 'click', '1'], env))));
    stats.push(stat('spawn xdotool type 100', await measure(m, 1, () => run('xdotool', ['type', '--delay', '0', text], env))));
    stats.push(stat('spawn import png', await measure(m, 1, () => run('import', ['-display', env.DISPLAY ?? '', '-window', 'root', 'png:-'], env))));
    const get = (name: string) => stats.find(s => s.name === name)!.p50;
    return {
      width: d.width,
      height: d.height,
      shm: d.shmEnabled,
      stats,
      ratios: {
        'click: xdotool / x11': get('spawn xdotool click') / get('click (round trip)'),
        'type 100: xdotool / x11': get('spawn xdotool type 100') / get('type 100 ASCII chars'),
        'png: import / x11': get('spawn import png') / get('screenshot png (L6)'),
      },
    };
  } finally {
    await d.close();
    await h?.stop();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const arg = (k: string) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : undefined; };
  const socketPath = arg('--socket');
  const display = socketPath ? `:${socketPath.replace(/.*X(\d+)$/, '$1')}` : undefined;
  const r = await benchDisplay({ socketPath, displayEnv: display, iterations: Number(arg('--iterations') ?? 40) });
  console.log(`display ${r.width}x${r.height}, MIT-SHM ${r.shm ? 'on' : 'off'}`);
  console.log('name'.padEnd(26), 'n'.padStart(4), 'p50 ms'.padStart(9), 'p95 ms'.padStart(9), 'min ms'.padStart(9));
  for (const s of r.stats) console.log(s.name.padEnd(26), String(s.n).padStart(4), s.p50.toFixed(2).padStart(9), s.p95.toFixed(2).padStart(9), s.min.toFixed(2).padStart(9));
  for (const [k, v] of Object.entries(r.ratios)) console.log(`${k}: ${v.toFixed(0)}x`);
}
