import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { run } from '../common/exec.ts';
import { DrumsError, HostError } from '../common/errors.ts';

/**
 * The OCI runtime (runc, or crun where the host allows it), driven through its
 * CLI with a per-instance state root so instances never see each other's
 * containers.
 */
export interface RuntimeInfo {
  name: 'runc' | 'crun';
  path: string;
}

export function cgroupMode(): 'v1' | 'hybrid' | 'v2' {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const ctrls = readFileSync('/sys/fs/cgroup/cgroup.controllers', 'utf8');
    return ctrls.includes('memory') ? 'v2' : 'hybrid';
  }
  return existsSync('/sys/fs/cgroup/unified') ? 'hybrid' : 'v1';
}

function which(bin: string): string | undefined {
  for (const dir of (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':')) {
    if (existsSync(`${dir}/${bin}`)) return `${dir}/${bin}`;
  }
  return undefined;
}

/** `wanted` (DRUMS_RUNTIME: a name or a path) picks one explicitly; otherwise crun on a pure cgroup v2 host, else runc. */
export function detectRuntime(wanted?: string): RuntimeInfo {
  if (wanted) {
    const path = wanted.includes('/') ? wanted : which(wanted);
    if (!path) throw new DrumsError('runtime_missing', `DRUMS_RUNTIME=${wanted} not found on PATH`);
    return { name: path.endsWith('crun') ? 'crun' : 'runc', path };
  }
  const crun = which('crun');
  if (crun && cgroupMode() === 'v2') return { name: 'crun', path: crun };
  const runc = which('runc');
  if (runc) return { name: 'runc', path: runc };
  throw new DrumsError('runtime_missing', 'no OCI runtime found: install runc (apt-get install runc) or run scripts/setup.sh');
}

/** Every session process's OOM score adjustment (the daemon's is -500): a session's processes go before the daemon. */
export const SESSION_OOM_SCORE_ADJ = 500;
/** util-linux's choom (essential on Debian and Ubuntu). */
const CHOOM = '/usr/bin/choom';

export interface StartResult {
  pid: number;
}

export interface ContainerState {
  id: string;
  pid: number;
  status: string;
}

export class OciRuntime {
  readonly info: RuntimeInfo;
  readonly root: string;
  constructor(info: RuntimeInfo, root: string) {
    this.info = info;
    this.root = root;
  }

  private argv(...args: string[]): string[] {
    return [this.info.path, '--root', this.root, ...args];
  }

  /**
   * `run -d`: the runtime exits once the container has started. The container's
   * init gets /dev/null as stdio and the runtime logs to `logFile` (the session's
   * own processes log inside it, guest/session-init). No host file or socket stays
   * open in the session, so CRIU can checkpoint it (src/host/criu.ts); its
   * liveness is its init's PID and start time, polled by the manager.
   */
  async start(id: string, bundle: string, logFile: string): Promise<StartResult> {
    const argv = [this.info.path, '--root', this.root, '--log', logFile, 'run', '-d', '--pid-file', `${bundle}/init.pid`, '--bundle', bundle, id];
    return this._detached(argv, bundle, logFile, 'run');
  }

  /**
   * `restore -d` of a checkpoint (made by `checkpoint`) into the container `id` of `bundle`:
   * the restored processes get the log file as stdio, like `start`'s. `criuArgs` are runc's
   * restore flags (e.g. --tcp-established); `criu` is the criu binary runc drives.
   */
  async restore(
    id: string,
    bundle: string,
    logFile: string,
    o: { criu: string; imagePath: string; workPath: string; flags: string[]; timeoutMs?: number; env?: Record<string, string> },
  ): Promise<StartResult> {
    const argv = [
      this.info.path,
      '--root',
      this.root,
      '--log',
      logFile,
      '--criu',
      o.criu,
      'restore',
      '-d',
      '--image-path',
      o.imagePath,
      '--work-path',
      o.workPath,
      ...o.flags,
    ];
    argv.push('--pid-file', `${bundle}/init.pid`, '--bundle', bundle, id);
    return this._detached(argv, bundle, logFile, 'restore', o.timeoutMs ?? 120_000, o.env);
  }

  /**
   * `checkpoint` of a running (or paused) container into `imagePath`, leaving it running
   * (`--leave-running`); `flags` are runc's checkpoint flags.
   */
  async checkpoint(
    id: string,
    o: { criu: string; imagePath: string; workPath: string; flags: string[]; timeoutMs?: number; env?: Record<string, string> },
  ): Promise<void> {
    const argv = [
      this.info.path,
      '--root',
      this.root,
      '--criu',
      o.criu,
      'checkpoint',
      '--leave-running',
      '--image-path',
      o.imagePath,
      '--work-path',
      o.workPath,
      ...o.flags,
      id,
    ];
    await run(argv, { timeoutMs: o.timeoutMs ?? 120_000, env: { ...process.env, ...o.env, DRUMS_CRIU_DUMP: '1' } });
  }

  private async _detached(
    argv: string[],
    bundle: string,
    logFile: string,
    what: string,
    timeoutMs?: number,
    env?: Record<string, string>,
  ): Promise<StartResult> {
    // All three /dev/null: runc hands its stdio to the container's init. Its own errors go to --log.
    // `env` is added to runc's environment, which runc passes on to the CRIU it runs.
    const child: ChildProcess = spawn(argv[0]!, argv.slice(1), {
      stdio: 'ignore',
      detached: timeoutMs !== undefined,
      ...(env ? { env: { ...process.env, ...env } } : {}),
    });
    // A stuck restore (CRIU waits on its restored tasks) is killed with its whole process group.
    const timer = timeoutMs ? setTimeout(() => child.pid && killGroup(child.pid), timeoutMs) : undefined;
    const code: number = (await new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('exit', (c) => resolve(c ?? 1));
    }).finally(() => clearTimeout(timer))) as number;
    if (code !== 0) {
      let tail = '';
      try {
        tail = readFileSync(logFile, 'utf8').trim().split('\n').slice(-5).join('\n');
      } catch {}
      throw new HostError(`${this.info.name} ${what}`, `exit ${code}: ${tail}`, { container: argv[argv.length - 1] });
    }
    // The pid file saves a `state` round trip.
    const pid = Number(readFileSync(`${bundle}/init.pid`, 'utf8').trim());
    if (!(pid > 0)) throw new HostError(`${this.info.name} ${what}`, `no init pid for container ${argv[argv.length - 1]}`);
    return { pid };
  }

  async state(id: string): Promise<ContainerState | undefined> {
    const r = await run(this.argv('state', id), { okCodes: [0, 1] });
    if (r.code !== 0) return undefined;
    const s = JSON.parse(r.stdout) as { id: string; pid: number; status: string };
    return { id: s.id, pid: s.pid, status: s.status };
  }

  async list(): Promise<ContainerState[]> {
    if (!existsSync(this.root)) return [];
    const r = await run(this.argv('list', '--format', 'json'), { okCodes: [0, 1] });
    if (r.code !== 0 || !r.stdout.trim() || r.stdout.trim() === 'null') return [];
    return (JSON.parse(r.stdout) as { id: string; pid: number; status: string }[]).map((s) => ({ id: s.id, pid: s.pid, status: s.status }));
  }

  /**
   * SIGKILL to the container's init tears down its whole PID namespace; then remove it. `delete`
   * fails while processes of the container are still exiting (it waits a while for the init, then
   * can't remove the cgroup), so it is tried again until the container is gone, for `waitMs`.
   */
  async destroy(id: string, waitMs = 20_000): Promise<void> {
    await run(this.argv('kill', id, 'KILL'), { okCodes: [0, 1] });
    const until = performance.now() + waitMs;
    for (;;) {
      const r = await run(this.argv('delete', '--force', id), { okCodes: [0, 1] });
      if (r.code === 0 || !(await this.state(id))) return;
      if (performance.now() > until)
        throw new HostError(`${this.info.name} delete`, `container ${id} still there: ${r.stderr.trim().split('\n').at(-1) ?? ''}`, { container: id });
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /**
   * Spawns `runtime exec` (caller handles stdio). Never uses a shell. The command gets the
   * session's OOM score explicitly: crun's exec (the default on cgroup v2) left it with the
   * daemon's -500, so a memory hog run by exec scored below the session's X server and
   * init (+500), and the kernel killed those first. util-linux's choom sets the score and execs the runtime
   * (same PID, so a signal to the child still reaches the runtime, which forwards it).
   */
  spawnExec(id: string, opts: { uid: number; gid: number; cwd: string; env: Record<string, string>; caps: string[]; args: string[] }): ChildProcess {
    const a = ['exec', '--user', `${opts.uid}:${opts.gid}`, '--cwd', opts.cwd];
    for (const [k, v] of Object.entries(opts.env)) a.push('--env', `${k}=${v}`);
    for (const c of opts.caps) a.push('--cap', c);
    a.push(id, ...opts.args);
    return spawn(CHOOM, ['-n', String(SESSION_OOM_SCORE_ADJ), '--', ...this.argv(...a)], { stdio: ['pipe', 'pipe', 'pipe'] });
  }
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {}
}
