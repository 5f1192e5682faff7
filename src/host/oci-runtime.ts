import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, constants, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmdirSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../common/exec.ts';
import { DrumsError, HostError } from '../common/errors.ts';
import { cgroupMode } from './cgroup-fs.ts';

/**
 * The OCI runtime (runc, or crun where the host allows it), driven through its
 * CLI with a per-instance state root so instances never see each other's
 * containers.
 */
export interface RuntimeInfo {
  name: 'runc' | 'crun';
  path: string;
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

/** The OCI process of a container's config.json, as far as an exec reads it. */
interface OciProcess {
  user: { uid: number; gid: number; additionalGids?: number[] };
  env?: string[];
  capabilities?: { bounding?: string[]; effective?: string[]; permitted?: string[]; inheritable?: string[]; ambient?: string[] };
  [k: string]: unknown;
}

/** A bundle's config.json is a few kB; one over this is not the daemon's. */
const MAX_CONFIG_BYTES = 1024 * 1024;

export class OciRuntime {
  readonly info: RuntimeInfo;
  readonly root: string;
  /** Each container's bundle, learnt from start, restore or state (an adopted session's first call is a state). */
  private readonly bundles = new Map<string, string>();
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
    this.bundles.set(id, bundle);
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
    this.bundles.set(id, bundle);
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
    const s = JSON.parse(r.stdout) as { id: string; pid: number; status: string; bundle?: string };
    if (s.bundle) this.bundles.set(id, s.bundle);
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
    this.bundles.delete(id);
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
   *
   * The command's argv and environment never reach the runtime's command line, which every
   * local user can read in /proc/<pid>/cmdline: they go in an OCI process file (`exec --process`),
   * made 0600 in a fresh 0700 directory of root's and unlinked before the runtime starts. The
   * runtime reads it through the descriptor it inherits as fd 3 (/proc/self/fd/3); only root and
   * the runtime's own process can open that. The process is the container's own (config.json) with
   * what `exec --user/--cwd/--env/--cap` used to change: the same user, groups, capabilities and
   * environment as before (checked by tests/integration/exec-cmdline.test.ts).
   */
  spawnExec(id: string, opts: { uid: number; gid: number; cwd: string; env: Record<string, string>; caps: string[]; args: string[] }): ChildProcess {
    let fd: number;
    try {
      fd = processFile(execProcess(this._baseProcess(id), opts));
    } catch (e) {
      // Never a throw: callers take the child's exit as the result, as when the runtime itself
      // fails (a container already gone, a full /dev/shm).
      return failedExec(`${this.info.name} exec: container ${id}: ${(e as Error).message}`);
    }
    try {
      const argv = this.argv('exec', '--process', '/proc/self/fd/3', id);
      return spawn(CHOOM, ['-n', String(SESSION_OOM_SCORE_ADJ), '--', ...argv], { stdio: ['pipe', 'pipe', 'pipe', fd] });
    } finally {
      // The child holds its own copy from here.
      closeSync(fd);
    }
  }

  /** The container's process as its config.json has it (the daemon wrote it; read bounded, never through a link). */
  private _baseProcess(id: string): OciProcess {
    let bundle = this.bundles.get(id);
    if (!bundle) {
      // Not started or adopted by this runtime object (a caller that skipped `state`): ask the runtime once.
      const r = spawnSync(this.info.path, ['--root', this.root, 'state', id], { encoding: 'utf8', timeout: 10_000, maxBuffer: MAX_CONFIG_BYTES });
      bundle = r.status === 0 ? (JSON.parse(r.stdout) as { bundle?: string }).bundle : undefined;
      if (!bundle) throw new HostError(`${this.info.name} exec`, `container ${id} not found`, { container: id });
      this.bundles.set(id, bundle);
    }
    const fd = openSync(join(bundle, 'config.json'), constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const buf = Buffer.alloc(MAX_CONFIG_BYTES + 1);
      let n = 0;
      for (let k = 1; k > 0 && n < buf.length; n += k) k = readSync(fd, buf, n, buf.length - n, null);
      if (n > MAX_CONFIG_BYTES) throw new HostError(`${this.info.name} exec`, `config.json of ${id} is over ${MAX_CONFIG_BYTES} bytes`, { container: id });
      return (JSON.parse(buf.subarray(0, n).toString('utf8')) as { process: OciProcess }).process;
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * What runc's `exec --user uid:gid --cwd --env --cap` makes of the container's process (runc 1.1's
 * getProcess): user and gid replaced (its additional groups kept), the environment appended (the
 * last of a name wins, as in the runtime's init), each cap added to the bounding, effective and
 * permitted sets, no terminal.
 */
export function execProcess(
  base: OciProcess,
  o: { uid: number; gid: number; cwd: string; env: Record<string, string>; caps: string[]; args: string[] },
): OciProcess {
  const env = new Map<string, string>();
  for (const kv of [...(base.env ?? []), ...Object.entries(o.env).map(([k, v]) => `${k}=${v}`)]) {
    const i = kv.indexOf('=');
    env.delete(kv.slice(0, i));
    env.set(kv.slice(0, i), kv);
  }
  const c = base.capabilities ?? {};
  const plus = (set?: string[]) => [...new Set([...(set ?? []), ...o.caps])];
  return {
    ...base,
    terminal: false,
    user: { ...base.user, uid: o.uid, gid: o.gid },
    args: o.args,
    cwd: o.cwd,
    env: [...env.values()],
    capabilities: { ...c, bounding: plus(c.bounding), effective: plus(c.effective), permitted: plus(c.permitted) },
  };
}

/** A child that exits 1 with `message` on stderr (no secret in it: it is on this child's command line). */
function failedExec(message: string): ChildProcess {
  return spawn(process.execPath, ['-e', 'process.stderr.write(`${process.argv[1]}\\n`); process.exit(1)', message], { stdio: ['pipe', 'pipe', 'pipe'] });
}

/**
 * `p` as JSON in a file only root can open, already unlinked: a fresh mkdtemp directory (0700, root's,
 * an unguessable name; a planted one makes mkdtemp pick another), the file made there with
 * O_EXCL|O_NOFOLLOW and 0600. Returns a read-write descriptor for the child to inherit.
 */
function processFile(p: OciProcess): number {
  // A tmpfs where there is one: the bytes never reach a disk.
  const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'drums-exec-'));
  const path = join(dir, 'process.json');
  let fd = -1;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    const bytes = Buffer.from(JSON.stringify(p));
    for (let n = 0; n < bytes.length; ) n += writeSync(fd, bytes, n, bytes.length - n);
    return fd;
  } catch (e) {
    if (fd >= 0) closeSync(fd);
    throw e;
  } finally {
    try {
      unlinkSync(path);
    } catch {}
    rmdirSync(dir);
  }
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {}
}
