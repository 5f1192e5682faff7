// The image builder: turns a recipe into `<imagesDir>/<name>-<hash12>/rootfs`.
//
// Every command that touches the rootfs runs through
//   setpriv --pdeathsig KILL unshare --mount --pid --fork --kill-child --propagation private
// and mounts /proc, /sys (ro) and /dev inside that private mount namespace, so
// the mounts vanish with the namespace even if the builder is killed. The
// build happens in `.tmp-<name>-<hash12>-<pid>/` and is renamed into place at
// the end; a lock file serialises concurrent builds of the same image.

import { spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  mkdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  copyFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { type DaemonConfig, loadConfig } from '../common/config.ts';
import { ImageBuildError, ImageError } from './errors.ts';
import { acquireLock } from './lock.ts';
import type { ProgressCallback } from './progress.ts';
import { BUILDER_VERSION, isDebootstrapBase, resolveRecipe, rootSuite, REPO_ROOT, type Recipe, type RecipeOptions, type ResolvedRecipe } from './recipe.ts';

export const DEFAULT_IMAGES_DIR = '/var/lib/drums/images';
const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
const DEFAULT_SECURITY_MIRROR = 'http://deb.debian.org/debian-security';
const LOG_TAIL_LINES = 20;
const CHROOT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface ImageManifest {
  name: string;
  /** Full sha256 of the recipe (see recipeHash). */
  hash: string;
  hash12: string;
  description: string;
  recipe: Recipe;
  parent: { name: string; hash: string } | null;
  /** Build-time environment of the recipe chain (parent first, child wins). */
  env: Record<string, string>;
  debianSuite: string;
  mirror: string;
  builtAt: string;
  buildSeconds: number;
  /** Disk usage of rootfs/ in bytes (du -sx). */
  sizeBytes: number;
  /** Number of installed Debian packages in the rootfs. */
  packageCount: number;
  builderVersion: number;
}

export interface BuiltImage {
  name: string;
  hash: string;
  /** `<imagesDir>/<name>-<hash12>` */
  dir: string;
  /** `<dir>/rootfs` */
  rootfs: string;
  manifest: ImageManifest;
}

export interface ImageDirOptions {
  /** Default: the config's imagesDir (DRUMS_IMAGE_DIR, else /var/lib/drums/images). */
  imagesDir?: string;
}

/** Debian mirrors for a build, from the config (DRUMS_DEBIAN_MIRROR, DRUMS_DEBIAN_SECURITY_MIRROR). */
export type MirrorConfig = Pick<DaemonConfig, 'debianMirror' | 'debianSecurityMirror'>;

export interface BuildOptions extends RecipeOptions, ImageDirOptions {
  onProgress?: ProgressCallback;
  /** Rebuild even if the image is cached (the parent is still reused if cached). */
  force?: boolean;
  /** How long to wait for a concurrent build of the same image (default 30 min). */
  lockTimeoutMs?: number;
  /** Default: the config's mirrors, resolved from the environment. */
  mirrors?: MirrorConfig;
  /** Stops the build (the running step's processes are killed) and cleans up as a failed build does. */
  signal?: AbortSignal;
}

/**
 * Note: the image functions also run without a daemon (the CLI's image
 * commands, the bench's "is it built" checks, tests), so without an explicit
 * directory they resolve the one config field, from the environment.
 */
export function imagesDirOf(opts?: ImageDirOptions): string {
  return opts?.imagesDir ?? loadConfig(process.env).imagesDir;
}

// ---------------------------------------------------------------- mirrors

interface AptEntry {
  uri: string;
  suites: string[];
}

function hostAptEntries(): AptEntry[] {
  const entries: AptEntry[] = [];
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  };
  const oneLine = (text: string): void => {
    for (const raw of text.split('\n')) {
      const line = raw
        .replace(/#.*/, '')
        .replace(/\[[^\]]*\]/, ' ')
        .trim()
        .split(/\s+/);
      if (line[0] === 'deb' && line.length >= 3) entries.push({ uri: line[1], suites: [line[2]] });
    }
  };
  const deb822 = (text: string): void => {
    for (const para of text.split(/\n\s*\n/)) {
      const fields = new Map<string, string>();
      for (const l of para.split('\n')) {
        if (l.startsWith('#')) continue;
        const m = /^([A-Za-z-]+):\s*(.*)$/.exec(l);
        if (m) fields.set(m[1].toLowerCase(), m[2].trim());
      }
      if (fields.get('enabled') === 'no') continue;
      if (!(fields.get('types') ?? '').split(/\s+/).includes('deb')) continue;
      const suites = (fields.get('suites') ?? '').split(/\s+/).filter(Boolean);
      for (const uri of (fields.get('uris') ?? '').split(/\s+/).filter(Boolean)) entries.push({ uri, suites });
    }
  };
  oneLine(read('/etc/apt/sources.list'));
  let files: string[] = [];
  try {
    files = readdirSync('/etc/apt/sources.list.d').sort();
  } catch {
    /* none */
  }
  for (const f of files) {
    const text = read(join('/etc/apt/sources.list.d', f));
    if (f.endsWith('.sources')) deb822(text);
    else if (f.endsWith('.list')) oneLine(text);
  }
  return entries;
}

/**
 * Debian mirrors to build from: the config's DRUMS_DEBIAN_MIRROR (and
 * DRUMS_DEBIAN_SECURITY_MIRROR), else the host's apt sources if they point at
 * a Debian mirror, else deb.debian.org.
 */
export function debianMirrors(c: MirrorConfig = loadConfig(process.env)): { main: string; security: string } {
  const entries = hostAptEntries();
  const strip = (u: string): string => u.replace(/\/+$/, '');
  const hostMain = entries.find((e) => /^https?:\/\/.+\/debian\/?$/.test(e.uri) && e.suites.some((s) => !s.endsWith('-security')));
  const hostSec = entries.find((e) => /^https?:\/\/.+\/debian-security\/?$/.test(e.uri));
  return {
    main: strip(c.debianMirror || (hostMain ? hostMain.uri : DEFAULT_MIRROR)),
    security: strip(c.debianSecurityMirror || (hostSec ? hostSec.uri : DEFAULT_SECURITY_MIRROR)),
  };
}

// ---------------------------------------------------------------- helpers

/** POSIX shell single-quoting. */
export function shq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** Shell snippet that (re)writes `path` with `content` and `mode`, replacing symlinks. */
function writeFileSh(path: string, content: string, mode = '0644'): string {
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
const UNSHARE = ['setpriv', '--pdeathsig', 'KILL', '--', 'unshare', '--mount', '--pid', '--fork', '--kill-child', '--propagation', 'private', '--'];

function countInstalledPackages(rootfs: string): number {
  const status = readFileSync(join(rootfs, 'var/lib/dpkg/status'), 'utf8');
  return status.split(/\n(?=Package: )/).filter((s) => /^Status: install ok installed$/m.test(s)).length;
}

function readManifest(dir: string): BuiltImage | undefined {
  try {
    const manifest = JSON.parse(readFileSync(join(dir, 'image.json'), 'utf8')) as ImageManifest;
    const rootfs = join(dir, 'rootfs');
    if (!statSync(rootfs).isDirectory()) return undefined;
    return { name: manifest.name, hash: manifest.hash, dir, rootfs, manifest };
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- build

interface Step {
  name: string;
  run: () => Promise<void>;
}

class Build {
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

function chainRecipes(r: ResolvedRecipe): Recipe[] {
  const out: Recipe[] = [];
  for (let cur: ResolvedRecipe | undefined = r; cur; cur = cur.parent) out.unshift(cur.recipe);
  return out;
}

function aptSources(suite: string, mirrors: { main: string; security: string }): string {
  const keyring = '/usr/share/keyrings/debian-archive-keyring.gpg';
  if (['sid', 'unstable', 'experimental'].includes(suite)) {
    return `Types: deb\nURIs: ${mirrors.main}\nSuites: ${suite}\nComponents: main\nSigned-By: ${keyring}\n`;
  }
  return (
    `Types: deb\nURIs: ${mirrors.main}\nSuites: ${suite} ${suite}-updates\nComponents: main\nSigned-By: ${keyring}\n\n` +
    `Types: deb\nURIs: ${mirrors.security}\nSuites: ${suite}-security\nComponents: main\nSigned-By: ${keyring}\n`
  );
}

const APT_CONF = `// Written by the drums image builder.
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
Acquire::Languages "none";
Dpkg::Use-Pty "0";
`;

const DPKG_NODOC = `# Written by the drums image builder: keep images lean.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
`;

const APT_GET = 'apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold';

const HOSTS = `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n`;

function planSteps(
  b: Build,
  r: ResolvedRecipe,
  opts: BuildOptions,
  imagesDir: string,
  emit: (step: string, message?: string) => void,
  mirrors: { main: string; security: string },
): Step[] {
  const recipe = r.recipe;
  const suite = rootSuite(r);
  const steps: Step[] = [];
  const chain = chainRecipes(r);

  if (isDebootstrapBase(recipe.base)) {
    const { variant } = recipe.base.debootstrap;
    steps.push({
      name: 'debootstrap',
      run: () => b.exec('debootstrap', [...UNSHARE, 'debootstrap', `--variant=${variant}`, '--components=main', suite, b.rootfs, mirrors.main]),
    });
  } else {
    const parentName = recipe.base.from;
    let parentRootfs = '';
    steps.push({
      name: `parent image ${parentName}`,
      run: async () => {
        try {
          const parent = await buildImage(parentName, {
            recipesDir: opts.recipesDir,
            repoRoot: opts.repoRoot,
            imagesDir,
            lockTimeoutMs: opts.lockTimeoutMs,
            mirrors: opts.mirrors,
            onProgress: (ev) => {
              if (ev.step !== 'done' && ev.step !== 'failed') emit(`parent image ${parentName}`, `[${ev.index}/${ev.total}] ${ev.step}`);
            },
          });
          if (parent.hash !== r.parent!.hash) {
            throw new Error(`parent ${parentName} changed during the build (hash ${parent.hash.slice(0, 12)}, expected ${r.parent!.hash.slice(0, 12)})`);
          }
          b.log(`parent image: ${parent.dir}`);
          parentRootfs = parent.rootfs;
        } catch (err) {
          const detail = err instanceof ImageBuildError ? `building parent failed: ${err.message}` : (err as Error).message;
          throw new ImageBuildError(b.name, `parent image ${parentName}`, detail, '');
        }
      },
    });
    steps.push({
      name: 'copy parent rootfs',
      run: () => b.exec('copy parent rootfs', ['setpriv', '--pdeathsig', 'KILL', '--', 'cp', '-a', '--reflink=auto', parentRootfs, b.rootfs]),
    });
  }

  steps.push({
    name: 'configure apt and dpkg',
    run: async () => {
      let resolv = '';
      try {
        resolv = readFileSync('/etc/resolv.conf', 'utf8');
      } catch {
        /* no host resolver config */
      }
      const script = [
        writeFileSh('/etc/dpkg/dpkg.cfg.d/90drums-nodoc', DPKG_NODOC),
        writeFileSh('/etc/apt/apt.conf.d/90drums', APT_CONF),
        'rm -f /etc/apt/sources.list\n',
        writeFileSh('/etc/apt/sources.list.d/debian.sources', aptSources(suite, mirrors)),
        writeFileSh('/usr/sbin/policy-rc.d', '#!/bin/sh\n# drums image build: do not start services\nexit 101\n', '0755'),
        writeFileSh('/etc/resolv.conf', resolv),
        writeFileSh('/etc/hostname', 'drums\n'),
        writeFileSh('/etc/hosts', HOSTS),
      ].join('');
      await b.chroot('configure apt and dpkg', script);
    },
  });

  const wantsPip = recipe.pip.length > 0;
  const pipRequested = chain.some((c) => c.packages.some((p) => p.split(/[:=]/)[0] === 'python3-pip'));
  if (recipe.packages.length > 0 || wantsPip || isDebootstrapBase(recipe.base)) {
    const pkgs = [...recipe.packages, ...(wantsPip ? ['python3', 'python3-pip'] : [])];
    const name = `install packages (${pkgs.length})`;
    steps.push({ name: 'apt-get update', run: () => b.chroot('apt-get update', 'apt-get -q update') });
    steps.push({
      name,
      run: () =>
        b.chroot(
          name,
          [
            // dist-upgrade first: debootstrap installs the point release, without -security/-updates.
            `${APT_GET} dist-upgrade`,
            pkgs.length ? `${APT_GET} install --no-install-recommends ${pkgs.map(shq).join(' ')}` : '',
          ]
            .filter(Boolean)
            .join('\n'),
        ),
    });
  }
  if (wantsPip) {
    steps.push({
      name: 'pip install',
      run: async () => {
        // Note: trust the host's CA bundle for this step only (hosts behind a TLS-inspecting
        // proxy need it), then remove it: the image keeps Debian's own trust store.
        const hostCa = '/etc/ssl/certs/ca-certificates.crt';
        const inside = '/tmp/drums-host-ca.crt';
        const caEnv: Record<string, string> = existsSync(hostCa) ? { PIP_CERT: inside } : {};
        if (existsSync(hostCa)) copyFileSync(hostCa, join(b.rootfs, inside));
        try {
          // Locked (src/image/recipe.ts): every file pip fetches must match a sha256 in the
          // repository's lock; --no-deps because the lock is the whole closure, which pip check
          // then confirms; no build isolation, so an sdist builds with Debian's setuptools and
          // wheel (from signed apt packages) instead of ones pip would fetch unhashed.
          const lock = '/tmp/drums-pip.lock';
          await b.chroot(
            'pip install',
            [
              `cat > ${lock}`,
              `python3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore --disable-pip-version-check --require-hashes --no-deps --no-build-isolation -r ${lock}`,
              'python3 -m pip check --disable-pip-version-check',
              `rm -f ${lock}`,
            ].join('\n'),
            { env: { ...b.env, ...caEnv }, input: r.pipLock ?? '' },
          );
        } finally {
          rmSync(join(b.rootfs, inside), { force: true });
        }
      },
    });
  }
  if (recipe.users.length > 0) {
    steps.push({
      name: 'create users',
      run: () => {
        let script = '';
        let passwords = '';
        for (const u of recipe.users) {
          const gid = u.gid ?? u.uid;
          const n = shq(u.name);
          script += `getent group ${gid} >/dev/null || getent group ${n} >/dev/null || groupadd -g ${gid} ${n}\n`;
          for (const g of u.groups) script += `getent group ${shq(g)} >/dev/null || groupadd ${shq(g)}\n`;
          const groups = u.groups.length ? `-G ${shq(u.groups.join(','))}` : '';
          script +=
            `if id -u ${n} >/dev/null 2>&1; then usermod -u ${u.uid} -g ${gid} -d ${shq(u.home)} -s ${shq(u.shell)} ${groups} ${n}; ` +
            `else useradd -m -u ${u.uid} -g ${gid} -d ${shq(u.home)} -s ${shq(u.shell)} ${groups} ${n}; fi\n`;
          script += `mkdir -p ${shq(u.home)} && chown ${u.uid}:${gid} ${shq(u.home)}\n`;
          if (u.password !== undefined) passwords += `${u.name}:${u.password}\n`;
        }
        // Passwords go through stdin so they never appear in argv or the log.
        if (passwords) script += 'chpasswd\n';
        return b.chroot('create users', script, passwords ? { input: passwords } : {});
      },
    });
  }
  if (recipe.files.length > 0) {
    const repoRoot = opts.repoRoot ?? REPO_ROOT;
    steps.push({
      name: 'copy files',
      run: async () => {
        for (const f of recipe.files) {
          const bytes = readFileSync(join(repoRoot, f.src));
          const dir = f.dest.slice(0, f.dest.lastIndexOf('/')) || '/';
          const tmp = `${f.dest}.drums-new`;
          b.log(`copy ${f.src} -> ${f.dest} (${f.mode})`);
          // Written from inside the chroot so symlinks in the rootfs resolve there.
          await b.chroot('copy files', `mkdir -p ${shq(dir)}\ncat > ${shq(tmp)}\nchmod ${f.mode} ${shq(tmp)}\nmv -f ${shq(tmp)} ${shq(f.dest)}`, {
            input: bytes,
          });
        }
      },
    });
  }
  recipe.run.forEach((cmd, i) => {
    const short = cmd.replace(/\s+/g, ' ').trim();
    const name = `run[${i}] ${short.length > 40 ? `${short.slice(0, 39)}…` : short}`;
    steps.push({ name, run: () => b.chroot(name, cmd, { env: b.env }) });
  });

  steps.push({
    name: 'clean up',
    run: () =>
      b.chroot(
        'clean up',
        [
          wantsPip && !pipRequested ? 'apt-get -q -y purge python3-pip && apt-get -q -y --purge autoremove' : '',
          'apt-get -q clean',
          'rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/partial/* /var/cache/debconf/*-old /var/lib/dpkg/*-old',
          'rm -rf /tmp/* /tmp/.[!.]* /var/tmp/* /root/.cache /var/cache/ldconfig/aux-cache',
          // Docs and man pages of packages installed before the dpkg excludes existed.
          'if [ -d /usr/share/doc ]; then find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete; find /usr/share/doc -mindepth 1 -type d -empty -delete; fi',
          'rm -rf /usr/share/man/* /usr/share/info/* /usr/share/groff/* /usr/share/lintian/*',
          'if [ -d /usr/share/locale ]; then find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +; fi',
          'find /var/log -type f -delete',
          'rm -f /usr/sbin/policy-rc.d',
          // Per-session machine id: empty here, written by the session runtime.
          ': > /etc/machine-id && chmod 0444 /etc/machine-id',
          'mkdir -p /var/lib/dbus && rm -f /var/lib/dbus/machine-id && ln -s /etc/machine-id /var/lib/dbus/machine-id',
          'rm -f /etc/resolv.conf && : > /etc/resolv.conf',
        ]
          .filter(Boolean)
          .join('\n'),
      ),
  });
  return steps;
}

/**
 * Builds image `name` (and its parent chain) unless the current recipe hash
 * is already built. Concurrent builds of the same image wait for each other.
 */
export async function buildImage(name: string, opts: BuildOptions = {}): Promise<BuiltImage> {
  const started = Date.now();
  const onProgress = opts.onProgress ?? (() => {});
  const resolved = resolveRecipe(name, opts);
  const hash12 = resolved.hash.slice(0, 12);
  const imagesDir = imagesDirOf(opts);
  const dir = join(imagesDir, `${name}-${hash12}`);

  if (!opts.force) {
    const cached = readManifest(dir);
    if (cached) {
      onProgress({ step: 'done', index: 1, total: 1, elapsedMs: Date.now() - started, message: `cached ${dir}` });
      return cached;
    }
  }
  if (process.getuid?.() !== 0) {
    throw new ImageBuildError(name, 'preflight', 'building images requires root', '');
  }
  mkdirSync(imagesDir, { recursive: true, mode: 0o755 });

  const lock = await acquireLock(join(imagesDir, `.lock-${name}-${hash12}`), {
    timeoutMs: opts.lockTimeoutMs,
    onWait: (pid) =>
      onProgress({
        step: 'waiting for concurrent build',
        index: 0,
        total: 0,
        elapsedMs: Date.now() - started,
        message: `pid ${pid}`,
      }),
  });
  try {
    if (!opts.force) {
      const cached = readManifest(dir);
      if (cached) {
        onProgress({ step: 'done', index: 1, total: 1, elapsedMs: Date.now() - started, message: `built concurrently: ${dir}` });
        return cached;
      }
    }
    // Holding the lock: leftovers of earlier builds of this image are stale.
    for (const e of readdirSync(imagesDir)) {
      if (e.startsWith(`.tmp-${name}-${hash12}-`) || e.startsWith(`.old-${name}-${hash12}-`)) {
        rmSync(join(imagesDir, e), { recursive: true, force: true });
      }
    }
    return await buildLocked(resolved, dir, imagesDir, opts, started);
  } finally {
    lock.release();
  }
}

async function buildLocked(resolved: ResolvedRecipe, dir: string, imagesDir: string, opts: BuildOptions, started: number): Promise<BuiltImage> {
  const { recipe, hash } = resolved;
  const hash12 = hash.slice(0, 12);
  const onProgress = opts.onProgress ?? (() => {});
  const tmp = join(imagesDir, `.tmp-${recipe.name}-${hash12}-${process.pid}`);
  const failedLog = join(imagesDir, `.failed-${recipe.name}-${hash12}.log`);
  const mirrors = debianMirrors(opts.mirrors);
  const env = Object.assign({}, ...chainRecipes(resolved).map((c) => c.env)) as Record<string, string>;

  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o755 });
  const b = new Build(recipe.name, tmp, env, opts.signal);
  let index = 0;
  let total = 0;
  let current = 'prepare';
  const emit = (step: string, message?: string): void => onProgress({ step, index, total, elapsedMs: Date.now() - started, message });
  try {
    b.log(
      `drums image build ${recipe.name} ${hash}\nbuilder version ${BUILDER_VERSION}, mirror ${mirrors.main}, security ${mirrors.security}\nstarted ${new Date(started).toISOString()}`,
    );
    const steps = planSteps(b, resolved, opts, imagesDir, emit, mirrors);
    steps.push({ name: 'finalize', run: async () => {} });
    total = steps.length;
    for (const step of steps.slice(0, -1)) {
      index++;
      current = step.name;
      if (opts.signal?.aborted) throw new ImageBuildError(recipe.name, step.name, 'cancelled', b.logTail());
      emit(step.name);
      const t0 = Date.now();
      b.log(`\n==> [${index}/${total}] ${step.name}`);
      await step.run();
      b.log(`<== ${step.name}: ${((Date.now() - t0) / 1000).toFixed(1)}s`);
    }

    index++;
    current = 'finalize';
    emit('finalize');
    const sizeOut = await new Promise<string>((resolve, reject) => {
      const child = spawn('du', ['-sx', '--block-size=1', b.rootfs], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`du exited with ${code}`))));
    });
    const manifest: ImageManifest = {
      name: recipe.name,
      hash,
      hash12,
      description: recipe.description,
      recipe,
      parent: resolved.parent ? { name: resolved.parent.recipe.name, hash: resolved.parent.hash } : null,
      env,
      debianSuite: rootSuite(resolved),
      mirror: mirrors.main,
      builtAt: new Date().toISOString(),
      buildSeconds: Math.round((Date.now() - started) / 100) / 10,
      sizeBytes: Number.parseInt(sizeOut, 10),
      packageCount: countInstalledPackages(b.rootfs),
      builderVersion: BUILDER_VERSION,
    };
    b.log(`\nbuilt in ${manifest.buildSeconds}s: ${manifest.packageCount} packages, ${(manifest.sizeBytes / 1e6).toFixed(1)} MB`);
    b.close();
    writeFileSync(join(tmp, 'image.json'), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o644 });
    if (existsSync(dir)) {
      // force: move the old build aside first (rename cannot replace a non-empty directory).
      const old = join(imagesDir, `.old-${recipe.name}-${hash12}-${process.pid}`);
      renameSync(dir, old);
      renameSync(tmp, dir);
      rmSync(old, { recursive: true, force: true });
    } else {
      renameSync(tmp, dir);
    }
    rmSync(failedLog, { force: true });
    onProgress({ step: 'done', index: total, total, elapsedMs: Date.now() - started, message: dir });
    return { name: recipe.name, hash, dir, rootfs: join(dir, 'rootfs'), manifest };
  } catch (err) {
    b.log(`\nFAILED at step '${current}': ${(err as Error).message}`);
    b.close();
    try {
      copyFileSync(b.logPath, failedLog);
    } catch {
      /* best effort */
    }
    onProgress({ step: 'failed', index, total, elapsedMs: Date.now() - started, message: current });
    if (err instanceof ImageBuildError) {
      if (err.logFile === undefined && err.logTail) err.message += `\n(full log: ${failedLog})`;
      throw err;
    }
    throw new ImageBuildError(recipe.name, current, (err as Error).message, b.logTail(), failedLog);
  } finally {
    b.close();
    rmSync(tmp, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- queries

/**
 * The built image for the CURRENT recipe of `name`, or undefined if that hash
 * is not built yet. Unknown recipe names throw `image_not_found`.
 */
export function findImage(name: string, opts: ImageDirOptions & RecipeOptions = {}): BuiltImage | undefined {
  const hash = resolveRecipe(name, opts).hash;
  return readManifest(join(imagesDirOf(opts), `${name}-${hash.slice(0, 12)}`));
}

export interface ListedImage extends BuiltImage {
  /** True if this build matches the current recipe (what findImage returns). */
  current: boolean;
}

/** All built images in the images directory, sorted by name then build time. */
export function listImages(opts: ImageDirOptions & RecipeOptions = {}): ListedImage[] {
  const imagesDir = imagesDirOf(opts);
  let entries: string[];
  try {
    entries = readdirSync(imagesDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const currentHash = new Map<string, string | undefined>();
  const out: ListedImage[] = [];
  for (const e of entries) {
    const m = /^([a-z0-9][a-z0-9_-]*)-([0-9a-f]{12})$/.exec(e);
    if (!m) continue;
    const img = readManifest(join(imagesDir, e));
    if (!img || img.name !== m[1]) continue;
    if (!currentHash.has(img.name)) {
      let h: string | undefined;
      try {
        h = resolveRecipe(img.name, opts).hash;
      } catch {
        h = undefined;
      }
      currentHash.set(img.name, h);
    }
    out.push({ ...img, current: currentHash.get(img.name) === img.hash });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name) || a.manifest.builtAt.localeCompare(b.manifest.builtAt));
}

/** Mount points / sources / options in any mount namespace that mention `dir`. */
function mountsUsing(dir: string): string[] {
  const seen = new Set<string>();
  const hits: string[] = [];
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    /* no /proc */
  }
  for (const pid of ['self', ...pids]) {
    let ns: string;
    let info: string;
    try {
      ns = readlinkSync(`/proc/${pid}/ns/mnt`);
      if (seen.has(ns)) continue;
      info = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
    } catch {
      continue;
    }
    seen.add(ns);
    for (const line of info.split('\n')) {
      const unescaped = line.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
      if (unescaped.includes(`${dir}/`) || unescaped.split(/[\s,=:]/).includes(dir)) hits.push(line);
    }
  }
  return hits;
}

/**
 * Removes built images: `name` may be a recipe name (all its builds) or a
 * directory name `<name>-<hash12>`. Refuses (`image_in_use`) while any mount
 * refers to the image; throws `image_not_found` if nothing matches.
 */
export function removeImage(name: string, opts: ImageDirOptions = {}): BuiltImage[] {
  const imagesDir = imagesDirOf(opts);
  const matches = listImages({ imagesDir }).filter((img) => img.name === name || `${img.name}-${img.hash.slice(0, 12)}` === name);
  if (matches.length === 0) throw new ImageError('image_not_found', `no built image ${JSON.stringify(name)} in ${imagesDir}`);
  for (const img of matches) {
    const used = mountsUsing(img.dir);
    if (used.length > 0) {
      throw new ImageError('image_in_use', `image ${img.dir} is in use by ${used.length} mount(s), e.g. ${used[0]}`);
    }
  }
  const removed: BuiltImage[] = [];
  for (const img of matches) {
    // Rename first so a half-deleted image is never visible under its real name.
    const doomed = join(imagesDir, `.old-${img.name}-${img.hash.slice(0, 12)}-${process.pid}`);
    renameSync(img.dir, doomed);
    rmSync(doomed, { recursive: true, force: true });
    const { current: _current, ...built } = img;
    removed.push(built);
  }
  return removed;
}
