// The image builder: turns a recipe into `<imagesDir>/<name>-<hash12>/rootfs`, by stages:
// the plan (plan.ts) over apt's settings (apt.ts), each step run in the rootfs (chroot.ts),
// the result kept in the store (store.ts). The build happens in `.tmp-<name>-<hash12>-<pid>/`
// and is renamed into place at the end; a lock file serialises concurrent builds of the same image.

import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { debianMirrors, type MirrorConfig } from './apt.ts';
import { Build } from './chroot.ts';
import { ImageBuildError } from './errors.ts';
import { acquireLock } from './lock.ts';
import { chainRecipes, planSteps } from './plan.ts';
import type { ProgressCallback } from './progress.ts';
import { BUILDER_VERSION, resolveRecipe, rootSuite, type RecipeOptions, type ResolvedRecipe } from './recipe.ts';
import { type BuiltImage, type ImageDirOptions, type ImageManifest, imagesDirOf, readManifest } from './store.ts';

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

function countInstalledPackages(rootfs: string): number {
  const status = readFileSync(join(rootfs, 'var/lib/dpkg/status'), 'utf8');
  return status.split(/\n(?=Package: )/).filter((s) => /^Status: install ok installed$/m.test(s)).length;
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
    const steps = planSteps(b, resolved, { opts, imagesDir, emit, mirrors, buildParent: buildImage });
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
