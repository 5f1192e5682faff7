import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DrumsClient } from '../client/client.ts';

const DRUMS = fileURLToPath(new URL('../../bin/drums', import.meta.url));

/** A throwaway daemon (own state dir and instance) for a benchmark run; stopped and swept at the end. */
export async function startPrivateDaemon(): Promise<{ client: DrumsClient; stop: () => Promise<void> }> {
  const instance = 'b' + randomBytes(2).toString('hex');
  const stateDir = mkdtempSync(`/var/tmp/drums-bench-${instance}-`);
  const token = randomBytes(16).toString('hex');
  const env: NodeJS.ProcessEnv = { ...process.env, DRUMS_STATE_DIR: stateDir, DRUMS_INSTANCE: instance, DRUMS_TOKEN: token, DRUMS_PORT: '0' };
  delete env.DRUMS_URL;
  const proc = spawn(DRUMS, ['serve'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /serving (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (c) => reject(new Error(`bench daemon exited (${c})`)));
  });
  return {
    client: new DrumsClient(url, token),
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
