// `drums osworld run|assets|exec`: hands over to Python. `run` and `assets` are the driver in
// sdk/python/drums/osworld_cli.py (the real desktop_env package on Drums sessions, provider in osworld.py); `exec` runs one of
// OSWorld's own scripts with the drums provider registered (sdk/python/drums/_boot/sitecustomize.py).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { badObservation, DEFAULT_OBSERVATION } from '../common/osworld-observation.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SDK = join(ROOT, 'sdk', 'python');

/** Why DIR is not an OSWorld checkout (null when it is one). */
export function notOsworldCheckout(dir: string): string | null {
  for (const f of ['desktop_env/desktop_env.py', 'desktop_env/evaluators/metrics/__init__.py', 'desktop_env/evaluators/getters/__init__.py']) {
    if (!existsSync(join(dir, f)))
      return `--osworld-src ${dir} is not an OSWorld checkout: it has no ${f} (point it at the directory that holds OSWorld's desktop_env package)`;
  }
  return null;
}

interface PyOpts {
  osworldSrc?: string;
  boot?: boolean;
  noDaemon?: boolean;
}

async function runPython(args: string[], o: PyOpts): Promise<number> {
  const python = process.env.DRUMS_PYTHON ?? join(ROOT, '.runtime', 'venv', 'bin', 'python');
  if (!existsSync(python)) {
    process.stderr.write(`drums: no Python at ${python}; run scripts/setup.sh (or set DRUMS_PYTHON to a Python with desktop-env installed)\n`);
    return 2;
  }
  const path = [SDK];
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (o.osworldSrc) {
    const src = resolve(o.osworldSrc);
    const why = notOsworldCheckout(src);
    if (why) {
      process.stderr.write(`drums: ${why}\n`);
      return 2;
    }
    path.unshift(src); // the checkout's desktop_env wins over the installed desktop-env
    env.DRUMS_OSWORLD_SRC = src;
  }
  if (o.boot) path.unshift(join(SDK, 'drums', '_boot'));
  env.PYTHONPATH = [...path, ...(process.env.PYTHONPATH ? [process.env.PYTHONPATH] : [])].join(':');
  // No daemon named (DRUMS_URL) and none running for the state dir: run on a private one.
  const stateDir = process.env.DRUMS_STATE_DIR || '/var/lib/drums';
  let stop = async () => {};
  if (!o.noDaemon && !process.env.DRUMS_URL && !existsSync(join(stateDir, 'daemon.json'))) {
    const { startPrivateDaemon } = await import('../client/private-daemon.ts');
    process.stderr.write('drums: no daemon running; starting a private one for this run\n');
    const d = await startPrivateDaemon();
    env.DRUMS_URL = d.client.url;
    env.DRUMS_TOKEN = d.token;
    stop = d.stop;
  }
  try {
    const child = spawn(python, args, { stdio: 'inherit', env });
    return await new Promise((res) => child.on('close', (code, sig) => res(code ?? (sig ? 130 : 1))));
  } finally {
    await stop();
  }
}

export interface RunOptions {
  parallel: string;
  oracle?: string;
  out?: string;
  allowInternet?: boolean;
  /** `--record [fps]`: true (2 fps) or the rate. */
  record?: boolean | string;
  verbose?: boolean;
  cache?: string;
  osworldSrc?: string;
  group?: string;
  observation?: string;
}

export async function osworldRun(tasks: string[], o: RunOptions): Promise<number> {
  const observation = o.observation ?? DEFAULT_OBSERVATION;
  const bad = badObservation(observation);
  if (bad) {
    process.stderr.write(`drums: --observation: ${bad}\n`);
    return 2;
  }
  const args = ['-m', 'drums.osworld_cli', 'run', ...tasks, '--parallel', o.parallel, '--observation', observation];
  if (o.oracle) args.push('--oracle', o.oracle);
  if (o.out) args.push('--out', o.out);
  if (o.cache) args.push('--cache', o.cache);
  if (o.allowInternet) args.push('--allow-internet');
  if (o.verbose) args.push('--verbose');
  if (o.group) args.push('--group', o.group);
  if (o.record !== undefined && o.record !== false) args.push(...(o.record === true ? ['--record'] : ['--record', o.record]));
  // A running daemon only: a private one would take the pool with it when this command ends.
  return runPython(args, { osworldSrc: o.osworldSrc, noDaemon: true });
}

export interface AssetsOptions {
  cache?: string;
  mirror?: string;
  fonts?: boolean;
  json?: boolean;
  force?: boolean;
}

export async function osworldAssets(action: 'fetch' | 'check' | 'standins', tasks: string[], o: AssetsOptions): Promise<number> {
  const args = ['-m', 'drums.osworld_cli', 'assets', action, ...tasks];
  if (o.cache) args.push('--cache', o.cache);
  if (o.mirror) args.push('--mirror', o.mirror);
  if (o.fonts) args.push('--fonts');
  if (o.json) args.push('--json');
  if (o.force) args.push('--force');
  return runPython(args, { noDaemon: true });
}

export interface PoolOptions {
  name: string;
  size: string;
  cache?: string;
  image?: string;
  allowInternet?: boolean;
  watch?: string;
  osworldSrc?: string;
}

/** `drums osworld pool TASK`: declares a pool of this set-up task and fills it (drums.osworld_pool; docs/pools.md). */
export async function osworldPool(task: string, o: PoolOptions): Promise<number> {
  const args = ['-m', 'drums.osworld_pool', 'pool', task, '--name', o.name, '--size', o.size];
  if (o.cache) args.push('--cache', o.cache);
  if (o.image) args.push('--image', o.image);
  if (o.allowInternet) args.push('--allow-internet');
  if (o.watch) args.push('--watch', o.watch);
  return runPython(args, { osworldSrc: o.osworldSrc });
}

/** Runs an OSWorld script (e.g. scripts/python/run_multienv.py --provider_name drums ...) with the drums provider. */
export async function osworldExec(script: string, scriptArgs: string[], o: { osworldSrc?: string }): Promise<number> {
  const src = o.osworldSrc ?? (notOsworldCheckout(process.cwd()) ? undefined : process.cwd());
  return runPython([script, ...scriptArgs], { osworldSrc: src, boot: true });
}
