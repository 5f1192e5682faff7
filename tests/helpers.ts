import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { DrumsApiError, type DrumsClient } from '../src/client/client.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';

export const ROOT = resolve(import.meta.dirname, '..');
export const DRUMS = join(ROOT, 'bin', 'drums');

/**
 * How much slower than this host the tests may run: DRUMS_TEST_TIME_SCALE, set where they run in
 * the software-emulated cgroup v2 VM (tests/vm/cgroup-v2-vm.test.ts); 1 elsewhere.
 */
export const TIME_SCALE = Math.max(1, Number(process.env.DRUMS_TEST_TIME_SCALE) || 1);

/** The tests run in CI (CI=true, as CI services set it): there, whatever a test needs must be present. */
export const CI = /^(true|1)$/i.test(process.env.CI ?? '');

/**
 * The `skip` option of a test that needs something this host may lack (data, an app in an image, a
 * tool, root): `why` is null when all is there, else what is missing and how to get it. Outside CI
 * the test is skipped with that message; under CI=true a missing thing is a failure, not a skip: this
 * throws at once, so the test file fails with the message (a green run has run every test).
 */
export function skipUnlessCI(why: string | null | false | undefined): string | false {
  if (!why) return false;
  if (CI) throw new Error(`CI=true and a test cannot run: ${why}`);
  return why;
}

/** A per-run prefix for every resource a test makes (instance names are ≤ 5 chars). */
export function runPrefix(): string {
  return 't' + randomBytes(2).toString('hex');
}

export interface TestDaemon {
  url: string;
  token: string;
  client: DrumsClient;
  stateDir: string;
  instance: string;
  env: NodeJS.ProcessEnv;
  proc: ChildProcess;
  /** Graceful stop (SIGTERM) and wait for exit. */
  stop(): Promise<void>;
  /** stop(), then assert nothing of the instance is left, then remove its state dir. */
  finish(): Promise<void>;
  /** Runs the CLI against this daemon. */
  cli(args: string[], opts?: { input?: string }): { status: number; stdout: string; stderr: string };
}

/** Starts `drums serve` on a free port with a fresh state dir and instance name. */
export async function startDaemon(extraEnv: NodeJS.ProcessEnv = {}): Promise<TestDaemon> {
  // A restart test passes the instance, state dir and token of the daemon it replaces (in extraEnv).
  const start = () =>
    startPrivateDaemon(extraEnv, {
      instance: runPrefix(),
      stateDirPrefix: '/var/tmp/drums-test-',
      readyTimeoutMs: 30_000 * TIME_SCALE,
      onStderr: (chunk) => {
        if (process.env.DRUMS_TEST_VERBOSE) process.stderr.write(chunk);
      },
    });
  let d: Awaited<ReturnType<typeof startPrivateDaemon>>;
  for (let attempt = 1; ; attempt++) {
    try {
      d = await start();
      break;
    } catch (e) {
      // In the emulated cgroup v2 VM (TIME_SCALE > 1), Node itself now and then dies at start
      // (V8 "Check failed: it->second.Size() > offset", SIGTRAP/SIGSEGV: QEMU TCG, never seen on
      // a real CPU): start it again, at most twice, and say so. Anywhere else a crash fails.
      if (TIME_SCALE === 1 || attempt > 2 || !/exited \((133|139)\)/.test(String(e))) throw e;
      process.stderr.write(`startDaemon: the daemon crashed at start under emulation (attempt ${attempt}), starting it again\n`);
    }
  }
  const { url, token, client, stateDir, instance, env, proc } = d;
  const stop = d.kill;
  const cliEnv = { ...env, DRUMS_URL: url };
  return {
    url,
    token,
    client,
    stateDir,
    instance,
    env: cliEnv,
    proc,
    stop,
    async finish() {
      await stop();
      assertClean(instance, stateDir);
      removeStateDir(stateDir);
    },
    cli(args, opts = {}) {
      try {
        const stdout = execFileSync(DRUMS, args, { env: cliEnv, input: opts.input ?? '', encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
        return { status: 0, stdout, stderr: '' };
      } catch (e) {
        const err = e as { status: number; stdout: string; stderr: string };
        return { status: err.status, stdout: err.stdout, stderr: err.stderr };
      }
    },
  };
}

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8' });
}

/** Every host object an instance could have left behind; all lists empty means clean. */
export function residue(instance: string, stateDir: string): Record<string, string[]> {
  const netns = sh('ip', ['netns', 'list'])
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith(`drums-${instance}-`));
  const links = (JSON.parse(sh('ip', ['-j', 'link', 'show'])) as { ifname: string }[]).map((l) => l.ifname).filter((n) => n.startsWith(`dr${instance}h`));
  const tables = sh('nft', ['list', 'tables'])
    .split('\n')
    .filter((l) => l.includes(`drums_${instance}`));
  const allMounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(stateDir));
  // The instance's runtime tmpfs belongs to a live daemon; session mounts are the rest.
  const instanceMounts = allMounts.filter((m) => m === join(stateDir, 'rt'));
  const mounts = allMounts.filter((m) => m !== join(stateDir, 'rt'));
  // Session cgroups, and the instance's own (its top cgroup, the sessions' parent, the daemon's and a
  // client's), which a live daemon keeps; also the top-level daemon and client cgroups of the layout before.
  const cgroups: string[] = [];
  const cgroupRoots: string[] = [];
  const bases = [...readdirSync('/sys/fs/cgroup').map((c) => join('/sys/fs/cgroup', c)), '/sys/fs/cgroup'];
  for (const base of bases) {
    const top = join(base, `drums-${instance}`);
    for (const own of [top, join(top, 'sessions'), join(top, 'daemon'), join(top, 'client'), `${top}-daemon`, `${top}-client`])
      if (existsSync(own)) cgroupRoots.push(own);
    for (const parent of [join(top, 'sessions'), top]) {
      if (!existsSync(parent)) continue;
      for (const e of readdirSync(parent, { withFileTypes: true }))
        if (e.isDirectory() && !(parent === top && ['sessions', 'daemon', 'client'].includes(e.name))) cgroups.push(join(parent, e.name));
    }
  }
  const runcRoot = join(stateDir, 'runc');
  const containers = existsSync(runcRoot) ? readdirSync(runcRoot) : [];
  const claimsDir = '/run/drums/subnets';
  const claims = existsSync(claimsDir)
    ? readdirSync(claimsDir).filter((f) => {
        try {
          return readFileSync(join(claimsDir, f), 'utf8').startsWith(instance + ' ');
        } catch {
          return false;
        }
      })
    : [];
  // Processes: anything whose environment names this instance's state dir, or that sits in its cgroups.
  const procs: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cg = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      // Zombies are exited processes waiting for a parent to reap them; where the daemon died
      // they belong to the host's PID 1, which on some hosts never reaps. They hold no resources.
      const state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];
      // (The daemon's own cgroup and a client's, in the same top cgroup, are not sessions.)
      const inSession = new RegExp(`:/drums-${instance}/(?!daemon$|client$)`, 'm').test(cg);
      if (inSession && state !== 'Z') procs.push(pid);
    } catch {}
  }
  const sessionDirs = existsSync(join(stateDir, 'sessions')) ? readdirSync(join(stateDir, 'sessions')) : [];
  // Loop devices backing session disks (they are autoclear: gone with their mount). One whose image
  // is already deleted and that is mounted nowhere in our namespace is held by another process's
  // private copy of the mount table (an `unshare --mount` started while the disk was mounted, e.g. a
  // parallel image build): it goes when that process exits, and is not this instance's residue.
  const loopJson = sh('losetup', ['--json', '--list']);
  const mountedDevs = readFileSync('/proc/self/mountinfo', 'utf8');
  const loops = (loopJson.trim() ? (JSON.parse(loopJson) as { loopdevices: { name: string; 'back-file'?: string }[] }).loopdevices : [])
    .filter((l) => (l['back-file'] ?? '').startsWith(stateDir + '/'))
    .filter((l) => !(l['back-file'] ?? '').endsWith(' (deleted)') || mountedDevs.includes(` ${l.name} `))
    .map((l) => l.name);
  return { netns, links, tables, mounts, instanceMounts, cgroups, cgroupRoots, containers, claims, procs, sessionDirs, loops };
}

export function assertClean(instance: string, stateDir: string): void {
  const r = residue(instance, stateDir);
  const left = Object.entries(r).filter(([, v]) => v.length);
  if (left.length) throw new Error(`instance ${instance} left objects behind: ${JSON.stringify(Object.fromEntries(left))}`);
}

export function removeStateDir(stateDir: string): void {
  if (stateDir.startsWith('/var/tmp/drums-test-')) rmSync(stateDir, { recursive: true, force: true });
}

/** The API error a call fails with (a promise, or a function that makes one); anything else fails the test. */
export async function apiError(p: Promise<unknown> | (() => Promise<unknown>)): Promise<DrumsApiError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    if (e instanceof DrumsApiError) return e;
    throw e;
  }
  throw new Error('expected an API error');
}

/** SIGKILL of a test daemon's process (bin/drums runs it under tini, which exits with it); waits for the exit. */
export async function killDaemon(d: TestDaemon): Promise<void> {
  if (d.proc.exitCode !== null || d.proc.signalCode !== null) return;
  const exited = new Promise((r) => d.proc.once('exit', r));
  const { pid } = JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number };
  process.kill(pid, 'SIGKILL');
  await exited;
}
