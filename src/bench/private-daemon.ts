import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DrumsClient } from '../client/client.ts';

const DRUMS = fileURLToPath(new URL('../../bin/drums', import.meta.url));

export interface PrivateDaemon {
  client: DrumsClient;
  /** The bearer token (for child processes that talk to the daemon themselves). */
  token: string;
  instance: string;
  stateDir: string;
  /** The daemon's own process (not the harness): its memory is part of what is measured. */
  pid: number;
  stop: () => Promise<void>;
}

/**
 * A throwaway daemon (own state dir and instance) in its own process, so the
 * harness's memory is separate from the daemon's; stopped (it destroys its
 * sessions on SIGTERM) and its state dir removed at the end.
 */
export async function startPrivateDaemon(extraEnv: NodeJS.ProcessEnv = {}, bin: string = DRUMS): Promise<PrivateDaemon> {
  const instance = 'b' + randomBytes(2).toString('hex');
  const stateDir = mkdtempSync(`/var/tmp/drums-bench-${instance}-`);
  const token = randomBytes(16).toString('hex');
  const env: NodeJS.ProcessEnv = { ...process.env, DRUMS_STATE_DIR: stateDir, DRUMS_INSTANCE: instance, DRUMS_TOKEN: token, DRUMS_PORT: '0', ...extraEnv };
  delete env.DRUMS_URL;
  const proc = spawn(bin, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr!.on('data', (d: Buffer) => { log = (log + d.toString()).slice(-4000); });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /serving (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (c) => reject(new Error(`bench daemon exited (${c}) before listening: ${log}`)));
  });
  return {
    client: new DrumsClient(url, token),
    token,
    instance,
    stateDir,
    pid: proc.pid!,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
