// Built images on disk: `<imagesDir>/<name>-<hash12>/` with `image.json` (the manifest) and
// `rootfs/`; finding, listing and removing them. Builds are build.ts's.

import { readFileSync, readdirSync, readlinkSync, renameSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../common/config.ts';
import { ImageError } from './errors.ts';
import { resolveRecipe, type Recipe, type RecipeOptions } from './recipe.ts';

export const DEFAULT_IMAGES_DIR = '/var/lib/drums/images';

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

/**
 * Note: the image functions also run without a daemon (the CLI's image
 * commands, the bench's "is it built" checks, tests), so without an explicit
 * directory they resolve the one config field, from the environment.
 */
export function imagesDirOf(opts?: ImageDirOptions): string {
  return opts?.imagesDir ?? loadConfig(process.env).imagesDir;
}

export function readManifest(dir: string): BuiltImage | undefined {
  try {
    const manifest = JSON.parse(readFileSync(join(dir, 'image.json'), 'utf8')) as ImageManifest;
    const rootfs = join(dir, 'rootfs');
    if (!statSync(rootfs).isDirectory()) return undefined;
    return { name: manifest.name, hash: manifest.hash, dir, rootfs, manifest };
  } catch {
    return undefined;
  }
}

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
