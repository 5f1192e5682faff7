// `drums osworld run`: hands the task list to the Python driver (sdk/python/drums/osworld.py),
// which runs them through the real desktop_env package on Drums sessions.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export async function osworldRun(tasks: string[], o: { parallel: string; oracle?: string; out?: string; allowInternet?: boolean; verbose?: boolean; group?: string }): Promise<number> {
  const python = process.env.DRUMS_PYTHON ?? join(ROOT, '.runtime', 'venv', 'bin', 'python');
  if (!existsSync(python)) {
    process.stderr.write(`drums: no Python at ${python}; run scripts/setup.sh (or set DRUMS_PYTHON to a Python with desktop-env installed)\n`);
    return 2;
  }
  const args = ['-m', 'drums.osworld', 'run', ...tasks, '--parallel', o.parallel];
  if (o.oracle) args.push('--oracle', o.oracle);
  if (o.out) args.push('--out', o.out);
  if (o.allowInternet) args.push('--allow-internet');
  if (o.verbose) args.push('--verbose');
  if (o.group) args.push('--group', o.group);
  const sdk = join(ROOT, 'sdk', 'python');
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: process.env.PYTHONPATH ? `${sdk}:${process.env.PYTHONPATH}` : sdk };
  // No daemon named (DRUMS_URL) and none running for the state dir: run the tasks on a private one.
  const stateDir = process.env.DRUMS_STATE_DIR || '/var/lib/drums';
  let stop = async () => {};
  if (!process.env.DRUMS_URL && !existsSync(join(stateDir, 'daemon.json'))) {
    const { startPrivateDaemon } = await import('../client/private-daemon.ts');
    process.stderr.write('drums: no daemon running; starting a private one for this run\n');
    const d = await startPrivateDaemon();
    env.DRUMS_URL = d.client.url;
    env.DRUMS_TOKEN = d.token;
    stop = d.stop;
  }
  try {
    const child = spawn(python, args, { stdio: 'inherit', env });
    return await new Promise((resolve) => child.on('close', (code, sig) => resolve(code ?? (sig ? 130 : 1))));
  } finally {
    await stop();
  }
}
