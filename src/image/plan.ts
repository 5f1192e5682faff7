// The build's plan: a recipe's stages, in order, as steps that run in the rootfs (chroot.ts).

import { copyFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { APT_CONF, APT_GET, DPKG_NODOC, aptSources, type MirrorConfig } from './apt.ts';
import { type Build, shq, type Step, UNSHARE, writeFileSh } from './chroot.ts';
import { ImageBuildError } from './errors.ts';
import { isDebootstrapBase, rootSuite, REPO_ROOT, type Recipe, type RecipeOptions, type ResolvedRecipe } from './recipe.ts';
import type { ProgressCallback } from './progress.ts';
import type { BuiltImage, ImageDirOptions } from './store.ts';

const HOSTS = `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n`;

export function chainRecipes(r: ResolvedRecipe): Recipe[] {
  const out: Recipe[] = [];
  for (let cur: ResolvedRecipe | undefined = r; cur; cur = cur.parent) out.unshift(cur.recipe);
  return out;
}

type Mirrors = { main: string; security: string };
/** What the plan reads of the build's options (build.ts's BuildOptions, which it cannot import: build.ts runs the plan). */
export interface PlanOptions extends RecipeOptions {
  lockTimeoutMs?: number;
  mirrors?: MirrorConfig;
}

/** What a stage needs besides the build and the recipe. */
export interface PlanContext {
  opts: PlanOptions;
  imagesDir: string;
  emit: (step: string, message?: string) => void;
  mirrors: Mirrors;
  /** Builds the parent image (buildImage, passed in: build.ts runs the plan). */
  buildParent: (name: string, opts: PlanOptions & ImageDirOptions & { onProgress: ProgressCallback }) => Promise<BuiltImage>;
}

/** The steps of a build of `r`, one function per recipe stage. */
export function planSteps(b: Build, r: ResolvedRecipe, ctx: PlanContext): Step[] {
  const recipe = r.recipe;
  const wantsPip = recipe.pip.length > 0;
  // python3-pip is purged at the end unless a recipe of the chain asked for it.
  const pipRequested = chainRecipes(r).some((c) => c.packages.some((p) => p.split(/[:=]/)[0] === 'python3-pip'));
  return [
    ...baseSteps(b, r, ctx),
    ...configureSteps(b, rootSuite(r), ctx.mirrors),
    ...packageSteps(b, recipe, wantsPip),
    ...pipSteps(b, r, wantsPip),
    ...userSteps(b, recipe),
    ...fileSteps(b, recipe, ctx.opts),
    ...runSteps(b, recipe),
    ...cleanUpSteps(b, wantsPip && !pipRequested),
  ];
}

/** The base: debootstrap, or a copy of the parent image's rootfs (built first if it is not). */
function baseSteps(b: Build, r: ResolvedRecipe, ctx: PlanContext): Step[] {
  const steps: Step[] = [];
  const recipe = r.recipe;
  const suite = rootSuite(r);
  if (isDebootstrapBase(recipe.base)) {
    const { variant } = recipe.base.debootstrap;
    steps.push({
      name: 'debootstrap',
      run: () => b.exec('debootstrap', [...UNSHARE, 'debootstrap', `--variant=${variant}`, '--components=main', suite, b.rootfs, ctx.mirrors.main]),
    });
  } else {
    const parentName = recipe.base.from;
    let parentRootfs = '';
    steps.push({
      name: `parent image ${parentName}`,
      run: async () => {
        try {
          const parent = await ctx.buildParent(parentName, {
            recipesDir: ctx.opts.recipesDir,
            repoRoot: ctx.opts.repoRoot,
            imagesDir: ctx.imagesDir,
            lockTimeoutMs: ctx.opts.lockTimeoutMs,
            mirrors: ctx.opts.mirrors,
            onProgress: (ev) => {
              if (ev.step !== 'done' && ev.step !== 'failed') ctx.emit(`parent image ${parentName}`, `[${ev.index}/${ev.total}] ${ev.step}`);
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

  return steps;
}

/** apt's sources and settings, dpkg's excludes, no services started, the resolver and host name. */
function configureSteps(b: Build, suite: string, mirrors: Mirrors): Step[] {
  const steps: Step[] = [];
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

  return steps;
}

/** The Debian packages (and python3-pip for a recipe with pip packages), after a dist-upgrade. */
function packageSteps(b: Build, recipe: Recipe, wantsPip: boolean): Step[] {
  const steps: Step[] = [];
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
  return steps;
}

/** The recipe's pip packages, from the repository's hash lock. */
function pipSteps(b: Build, r: ResolvedRecipe, wantsPip: boolean): Step[] {
  const steps: Step[] = [];
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
  return steps;
}

/** The recipe's users and groups. */
function userSteps(b: Build, recipe: Recipe): Step[] {
  const steps: Step[] = [];
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
  return steps;
}

/** The recipe's files, copied from the repository. */
function fileSteps(b: Build, recipe: Recipe, opts: PlanOptions): Step[] {
  const steps: Step[] = [];
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
  return steps;
}

/** The recipe's commands, one step each. */
function runSteps(b: Build, recipe: Recipe): Step[] {
  const steps: Step[] = [];
  recipe.run.forEach((cmd, i) => {
    const short = cmd.replace(/\s+/g, ' ').trim();
    const name = `run[${i}] ${short.length > 40 ? `${short.slice(0, 39)}…` : short}`;
    steps.push({ name, run: () => b.chroot(name, cmd, { env: b.env }) });
  });

  return steps;
}

/** Caches, docs, logs and the build's own settings out; an empty machine id for the session runtime to write. */
function cleanUpSteps(b: Build, purgePip: boolean): Step[] {
  const steps: Step[] = [];
  steps.push({
    name: 'clean up',
    run: () =>
      b.chroot(
        'clean up',
        [
          purgePip ? 'apt-get -q -y purge python3-pip && apt-get -q -y --purge autoremove' : '',
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
