/** A throwaway `drums serve` in its own process, state dir and instance: for the CLI, benches, the OSWorld runner and tests. */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DrumsClient } from './client.ts';

const DRUMS = fileURLToPath(new URL('../../bin/drums', import.meta.url));

export interface PrivateDaemon {
  client: DrumsClient;
  url: string;
  /** The bearer token (for child processes that talk to the daemon themselves). */
  token: string;
  instance: string;
  stateDir: string;
  /** The environment the daemon runs with. */
  env: NodeJS.ProcessEnv;
  /** The daemon's own process (not the harness): its memory is part of what is measured. */
  pid: number;
  proc: ChildProcess;
  /** SIGTERM (the daemon destroys its sessions and sweeps) and wait for the exit; keeps the state dir. */
  kill: () => Promise<void>;
  /** kill(), then remove the state dir. */
  stop: () => Promise<void>;
}

export interface PrivateDaemonOptions {
  /** The instance name (1-5 lowercase letters or digits); default 'b' + 4 hex digits. */
  instance?: string;
  /** The state dir is made with mkdtemp under this prefix (the instance is appended). */
  stateDirPrefix?: string;
  /** How long to wait for "serving <url>" (default 60 s). */
  readyTimeoutMs?: number;
  /** Every chunk of the daemon's stderr. */
  onStderr?: (chunk: Buffer) => void;
  /** The `drums` executable to serve with (default this checkout's bin/drums; a bench may run another checkout's). */
  bin?: string;
}

/**
 * Starts `bin/drums serve` on a free port with a fresh state dir, instance name and token,
 * and resolves once it prints `serving <url>`. The caller stops it.
 */
export async function startPrivateDaemon(extraEnv: NodeJS.ProcessEnv = {}, opts: PrivateDaemonOptions = {}): Promise<PrivateDaemon> {
  // A daemon that replaces another (a restart) is given its instance, state dir and token in extraEnv.
  const instance = extraEnv.DRUMS_INSTANCE ?? opts.instance ?? 'b' + randomBytes(2).toString('hex');
  const stateDir = extraEnv.DRUMS_STATE_DIR ?? mkdtempSync(`${opts.stateDirPrefix ?? '/var/tmp/drums-bench-'}${instance}-`);
  const token = extraEnv.DRUMS_TOKEN ?? randomBytes(16).toString('hex');
  const env: NodeJS.ProcessEnv = { ...process.env, DRUMS_STATE_DIR: stateDir, DRUMS_INSTANCE: instance, DRUMS_TOKEN: token, DRUMS_PORT: '0', ...extraEnv };
  delete env.DRUMS_URL;
  const proc = spawn(opts.bin ?? DRUMS, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr!.on('data', (d: Buffer) => {
    log = (log + d.toString()).slice(-8000);
    opts.onStderr?.(d);
  });
  const timeoutMs = opts.readyTimeoutMs ?? 60_000;
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`private daemon did not start in ${timeoutMs / 1000} s:\n${log}`)), timeoutMs);
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /serving (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    proc.once('exit', (c) => {
      clearTimeout(timer);
      reject(new Error(`private daemon exited (${c}) before listening:\n${log}`));
    });
  }).catch((e: unknown) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    throw e;
  });
  const kill = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    await exited;
  };
  return {
    client: new DrumsClient(url, token),
    url,
    token,
    instance,
    stateDir,
    env,
    pid: proc.pid!,
    proc,
    kill,
    async stop() {
      await kill();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
