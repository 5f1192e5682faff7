// A build's hands: its log, and every command it runs on the host or inside the rootfs.
//
// Every command that touches the rootfs runs through
//   setpriv --pdeathsig KILL unshare --mount --pid --fork --kill-child --propagation private
// and mounts /proc, /sys (ro) and /dev inside that private mount namespace, so
// the mounts vanish with the namespace even if the builder is killed.

import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ImageBuildError } from './errors.ts';

const LOG_TAIL_LINES = 20;
const CHROOT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** POSIX shell single-quoting. */
export function shq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** Shell snippet that (re)writes `path` with `content` and `mode`, replacing symlinks. */
export function writeFileSh(path: string, content: string, mode = '0644'): string {
  const dir = path.slice(0, path.lastIndexOf('/')) || '/';
  return `mkdir -p ${shq(dir)} && rm -f ${shq(path)} && printf '%s' ${shq(content)} > ${shq(path)} && chmod ${mode} ${shq(path)}\n`;
}

// Runs inside the private mount (and pid) namespace: mount the API
// filesystems into the rootfs, then chroot with a clean environment.
// The namespace starts with a copy of every host mount, sessions' disks and overlays among
// them, and a copy pins what it holds: a session destroyed during a build kept its loop device
// and its deleted disk image until the build ended. So the step pivots into the rootfs and
// drops the copied host tree (the umount and rmdir after the pivot are the rootfs's own).
const NS_SCRIPT = `set -e
r=$1; shift
mount --bind "$r" "$r"
mkdir -p "$r/proc" "$r/sys" "$r/dev"
mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$r/sys"
mount --rbind /dev "$r/dev"
cd "$r"
mkdir -p .drums-host-root
pivot_root . .drums-host-root
umount -l /.drums-host-root
rmdir /.drums-host-root
exec /usr/bin/env -i "$@"
`;
// setpriv --pdeathsig: unshare is SIGKILLed if the builder dies, and
// --kill-child then takes the namespace's init (and so the whole pid
// namespace and its mounts) with it.
export const UNSHARE = ['setpriv', '--pdeathsig', 'KILL', '--', 'unshare', '--mount', '--pid', '--fork', '--kill-child', '--propagation', 'private', '--'];

export interface Step {
  name: string;
  run: () => Promise<void>;
}

export class Build {
  name: string;
  tmp: string;
  rootfs: string;
  logPath: string;
  logFd: number;
  closed = false;
  env: Record<string, string>;
  signal?: AbortSignal;

  constructor(name: string, tmp: string, env: Record<string, string>, signal?: AbortSignal) {
    this.name = name;
    this.signal = signal;
    this.tmp = tmp;
    this.rootfs = join(tmp, 'rootfs');
    this.logPath = join(tmp, 'build.log');
    this.logFd = openSync(this.logPath, 'a', 0o644);
    this.env = env;
  }

  log(text: string): void {
    if (this.closed) return;
    writeSync(this.logFd, text.endsWith('\n') ? text : `${text}\n`);
  }

  logTail(): string {
    try {
      const lines = readFileSync(this.logPath, 'utf8').trimEnd().split('\n');
      return lines.slice(-LOG_TAIL_LINES).join('\n');
    } catch {
      return '';
    }
  }

  /** Runs argv on the host with output appended to the build log. */
  exec(step: string, argv: string[], input?: Buffer | string, shown?: string): Promise<void> {
    this.log(`\n${shown ?? `$ ${argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : shq(a))).join(' ')}`}`.slice(0, 4000));
    return new Promise((resolve, reject) => {
      if (this.signal?.aborted) return reject(new ImageBuildError(this.name, step, 'cancelled', this.logTail()));
      const child = spawn(argv[0], argv.slice(1), {
        stdio: [input === undefined ? 'ignore' : 'pipe', this.logFd, this.logFd],
        env: { PATH: `${CHROOT_PATH}:${process.env.PATH ?? ''}`, LANG: 'C.UTF-8', ...proxyEnv() },
      });
      // unshare --kill-child takes the step's whole process tree with it.
      const onAbort = () => child.kill('SIGKILL');
      this.signal?.addEventListener('abort', onAbort, { once: true });
      child.on('close', () => this.signal?.removeEventListener('abort', onAbort));
      if (input !== undefined) {
        child.stdin!.on('error', () => {
          /* reported via exit status */
        });
        child.stdin!.end(input);
      }
      child.on('error', (err) => reject(new ImageBuildError(this.name, step, `cannot run ${argv[0]}: ${err.message}`, this.logTail())));
      child.on('close', (code, signal) => {
        if (code === 0) return resolve();
        this.log(`(exit ${signal ?? code})`);
        if (this.signal?.aborted) return reject(new ImageBuildError(this.name, step, 'cancelled', this.logTail()));
        const prog = shown !== undefined ? 'command in chroot' : argv[argv.lastIndexOf('--') + 1];
        reject(new ImageBuildError(this.name, step, `${prog} exited with ${signal ? `signal ${signal}` : `status ${code}`}`, this.logTail()));
      });
    });
  }

  /** Runs a shell script inside the rootfs (private mount + pid namespace, chroot). */
  chroot(step: string, script: string, opts: { env?: Record<string, string>; input?: Buffer | string } = {}): Promise<void> {
    const env = {
      PATH: CHROOT_PATH,
      HOME: '/root',
      LANG: 'C.UTF-8',
      TERM: 'dumb',
      DEBIAN_FRONTEND: 'noninteractive',
      DEBCONF_NONINTERACTIVE_SEEN: 'true',
      ...proxyEnv(),
      ...(opts.env ?? {}),
    };
    return this.exec(
      step,
      [...UNSHARE, '/bin/sh', '-c', NS_SCRIPT, 'drums-chroot', this.rootfs, ...Object.entries(env).map(([k, v]) => `${k}=${v}`), '/bin/sh', '-ec', script],
      opts.input,
      `(chroot) $ ${script.replaceAll('\n', '\n(chroot) $ ')}`,
    );
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.logFd);
  }
}

function proxyEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ['http_proxy', 'https_proxy', 'no_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY']) {
    const v = process.env[k];
    if (v) out[k] = v;
  }
  return out;
}
