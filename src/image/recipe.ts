// Image recipes: loading, strict validation and content hashing.
//
// A recipe is `images/<name>.json` in the repository. Its hash covers the
// normalised recipe, the bytes of every file it copies in, the parent's hash
// (for `from` recipes), its pip lock (`<name>.pip.lock`, below) and
// BUILDER_VERSION, so any change that could change the built rootfs yields a
// new image directory.

import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, isAbsolute, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ImageError, RecipeError } from './errors.ts';

/** Bump when a change to the builder changes what it produces. */
export const BUILDER_VERSION = 1;

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const DEFAULT_RECIPES_DIR = join(REPO_ROOT, 'images');

export interface DebootstrapBase {
  debootstrap: { suite: string; variant: 'minbase' | 'buildd' };
}
export interface FromBase {
  from: string;
}
export type RecipeBase = DebootstrapBase | FromBase;

export interface RecipeUser {
  name: string;
  uid: number;
  /** Primary group id; defaults to uid (a group named like the user is created). */
  gid?: number;
  home: string;
  shell: string;
  groups: string[];
  password?: string;
}

export interface RecipeFile {
  /** Repository-relative source path. */
  src: string;
  /** Absolute destination path inside the image. */
  dest: string;
  /** Octal mode string such as "0755". */
  mode: string;
}

/** A validated recipe, with every optional list filled in. */
export interface Recipe {
  name: string;
  description: string;
  base: RecipeBase;
  packages: string[];
  pip: string[];
  users: RecipeUser[];
  files: RecipeFile[];
  run: string[];
  env: Record<string, string>;
}

export interface RecipeOptions {
  /** Directory holding `<name>.json` recipes (default: `<repo>/images`). */
  recipesDir?: string;
  /** Root that `files[].src` paths are relative to (default: the repository root). */
  repoRoot?: string;
}

const NAME_RE = /^[a-z0-9][a-z0-9_-]{0,47}$/;
// Debian package name, optional :arch and optional =version pin.
const DEB_PKG_RE = /^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$/;
// A pip requirement without whitespace that is not an option.
const PIP_RE = /^[A-Za-z0-9][A-Za-z0-9._\-[\],<>=!~*]*$/;
const USER_RE = /^[a-z_][a-z0-9_-]{0,31}$/;
const ENV_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MODE_RE = /^0?[0-7]{3,4}$/;

export function isDebootstrapBase(base: RecipeBase): base is DebootstrapBase {
  return 'debootstrap' in base;
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return `a ${typeof v}`;
}

class Checker {
  file: string;
  constructor(file: string) {
    this.file = file;
  }
  fail(field: string, problem: string): never {
    throw new RecipeError(this.file, field, problem);
  }
  object(v: unknown, field: string, allowed: string[], required: string[]): Obj {
    if (!isObj(v)) this.fail(field, `must be an object, got ${describe(v)}`);
    for (const k of Object.keys(v)) {
      if (!allowed.includes(k)) {
        this.fail(field ? `${field}.${k}` : k, `unknown field (allowed: ${allowed.join(', ')})`);
      }
    }
    for (const k of required) {
      if (v[k] === undefined) this.fail(field ? `${field}.${k}` : k, 'is required');
    }
    return v;
  }
  string(v: unknown, field: string, re?: RegExp, what?: string): string {
    if (typeof v !== 'string') this.fail(field, `must be a string, got ${describe(v)}`);
    if (re && !re.test(v)) this.fail(field, `${JSON.stringify(v)} is not ${what ?? `matching ${re}`}`);
    return v;
  }
  absPath(v: unknown, field: string): string {
    const s = this.string(v, field);
    if (!s.startsWith('/') || s.includes('\0') || s.split('/').includes('..')) {
      this.fail(field, `${JSON.stringify(s)} must be an absolute path without '..'`);
    }
    return posix.normalize(s);
  }
  int(v: unknown, field: string, min: number, max: number): number {
    if (typeof v !== 'number' || !Number.isInteger(v)) this.fail(field, `must be an integer, got ${describe(v)}`);
    if (v < min || v > max) this.fail(field, `must be between ${min} and ${max}, got ${v}`);
    return v;
  }
  array<T>(v: unknown, field: string, item: (x: unknown, f: string) => T): T[] {
    if (v === undefined) return [];
    if (!Array.isArray(v)) this.fail(field, `must be an array, got ${describe(v)}`);
    return v.map((x, i) => item(x, `${field}[${i}]`));
  }
}

/**
 * Validates a parsed recipe. `file` is used in error messages; when
 * `expectedName` is given the recipe's `name` must equal it.
 */
export function validateRecipe(raw: unknown, file: string, expectedName?: string): Recipe {
  const c = new Checker(file);
  const top = c.object(raw, '', ['name', 'description', 'base', 'packages', 'pip', 'users', 'files', 'run', 'env'], ['name', 'base']);
  const name = c.string(top.name, 'name', NAME_RE, 'a valid image name (lowercase letters, digits, - and _)');
  if (expectedName !== undefined && name !== expectedName) {
    c.fail('name', `${JSON.stringify(name)} does not match the file name (${JSON.stringify(expectedName)})`);
  }
  const description = top.description === undefined ? '' : c.string(top.description, 'description');

  let base: RecipeBase;
  const b = c.object(top.base, 'base', ['debootstrap', 'from'], []);
  if ((b.debootstrap === undefined) === (b.from === undefined)) {
    c.fail('base', 'must have exactly one of "debootstrap" or "from"');
  }
  if (b.debootstrap !== undefined) {
    const d = c.object(b.debootstrap, 'base.debootstrap', ['suite', 'variant'], ['suite']);
    const suite = c.string(d.suite, 'base.debootstrap.suite', /^[a-z][a-z0-9-]*$/, 'a Debian suite name');
    const variant = d.variant === undefined ? 'minbase' : c.string(d.variant, 'base.debootstrap.variant');
    if (variant !== 'minbase' && variant !== 'buildd') {
      c.fail('base.debootstrap.variant', `must be "minbase" or "buildd", got ${JSON.stringify(variant)}`);
    }
    base = { debootstrap: { suite, variant: variant as 'minbase' | 'buildd' } };
  } else {
    const from = c.string(b.from, 'base.from', NAME_RE, 'a valid image name');
    if (from === name) c.fail('base.from', 'a recipe cannot be built from itself');
    base = { from };
  }

  const packages = c.array(top.packages, 'packages', (x, f) => c.string(x, f, DEB_PKG_RE, 'a Debian package name'));
  const pip = c.array(top.pip, 'pip', (x, f) => c.string(x, f, PIP_RE, 'a pip requirement'));
  const users = c.array(top.users, 'users', (x, f): RecipeUser => {
    const u = c.object(x, f, ['name', 'uid', 'gid', 'home', 'shell', 'groups', 'password'], ['name', 'uid', 'home', 'shell']);
    const user: RecipeUser = {
      name: c.string(u.name, `${f}.name`, USER_RE, 'a valid user name'),
      uid: c.int(u.uid, `${f}.uid`, 1, 65533),
      home: c.absPath(u.home, `${f}.home`),
      shell: c.absPath(u.shell, `${f}.shell`),
      groups: c.array(u.groups, `${f}.groups`, (g, gf) => c.string(g, gf, USER_RE, 'a valid group name')),
    };
    if (u.gid !== undefined) user.gid = c.int(u.gid, `${f}.gid`, 1, 65533);
    if (u.password !== undefined) user.password = c.string(u.password, `${f}.password`);
    return user;
  });
  const files = c.array(top.files, 'files', (x, f): RecipeFile => {
    const o = c.object(x, f, ['src', 'dest', 'mode'], ['src', 'dest']);
    const src = c.string(o.src, `${f}.src`);
    if (src === '' || isAbsolute(src) || src.split(/[\\/]/).includes('..') || src.includes('\0')) {
      c.fail(`${f}.src`, `${JSON.stringify(src)} must be a repository-relative path without '..'`);
    }
    const dest = c.absPath(o.dest, `${f}.dest`);
    if (dest === '/') c.fail(`${f}.dest`, 'must name a file');
    const mode = o.mode === undefined ? '0644' : c.string(o.mode, `${f}.mode`, MODE_RE, 'an octal mode such as "0755"');
    return { src: posix.normalize(src), dest, mode: mode.padStart(4, '0') };
  });
  const run = c.array(top.run, 'run', (x, f) => {
    const s = c.string(x, f);
    if (s.trim() === '') c.fail(f, 'must not be empty');
    return s;
  });
  let env: Record<string, string> = {};
  if (top.env !== undefined) {
    const e = c.object(top.env, 'env', Object.keys(isObj(top.env) ? top.env : {}), []);
    env = {};
    for (const [k, v] of Object.entries(e)) {
      if (!ENV_RE.test(k)) c.fail(`env.${k}`, 'is not a valid environment variable name');
      env[k] = c.string(v, `env.${k}`);
    }
  }
  return { name, description, base, packages, pip, users, files, run, env };
}

function recipesDirOf(opts?: RecipeOptions): string {
  return opts?.recipesDir ?? DEFAULT_RECIPES_DIR;
}

/** Loads and validates `<recipesDir>/<name>.json`. Unknown names throw `image_not_found`. */
export function loadRecipe(name: string, opts?: RecipeOptions): Recipe {
  if (!NAME_RE.test(name)) throw new ImageError('image_not_found', `no image recipe named ${JSON.stringify(name)}`);
  const file = join(recipesDirOf(opts), `${name}.json`);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new ImageError('image_not_found', `no image recipe named ${JSON.stringify(name)} (looked for ${file})`);
    }
    throw err;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new RecipeError(file, '', `invalid JSON: ${(err as Error).message}`);
  }
  return validateRecipe(raw, file, name);
}

/** Names of all recipes in the recipes directory (sorted). */
export function listRecipes(opts?: RecipeOptions): string[] {
  return readdirSync(recipesDirOf(opts))
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.slice(0, -5))
    .filter((n) => NAME_RE.test(n))
    .sort();
}

/** JSON with object keys sorted recursively, no whitespace. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isObj(v)) {
    const keys = Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** A recipe and all its ancestors, root first, each with its full hash. */
export interface ResolvedRecipe {
  recipe: Recipe;
  hash: string;
  parent: ResolvedRecipe | undefined;
  /** The pip lock's text (requirements with --hash), for a recipe with pip packages. */
  pipLock?: string;
}

/**
 * pip installs are locked: a recipe's `pip` list is every distribution pip installs (the whole
 * closure beyond what Debian provides, each `name==version`), and `<name>.pip.lock` beside the
 * recipe has the same pins with the sha256 of every file pip may pick (written by
 * `drums image pip-lock`, src/image/pip-lock.ts, from the package index). The build installs with --require-hashes
 * --no-deps, so pip fetches nothing whose bytes are not in the repository.
 */
export interface PipPin {
  /** PEP 503-normalised. */
  name: string;
  version: string;
}

const PIN_RE = /^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$/;
const normalise = (name: string) => name.toLowerCase().replace(/[-_.]+/g, '-');

/** The exact pin `name==version`, or undefined for anything else (ranges, extras, markers). */
export function pipPin(req: string): PipPin | undefined {
  const m = PIN_RE.exec(req);
  return m ? { name: normalise(m[1]!), version: m[2]! } : undefined;
}

export function pipLockPath(name: string, opts?: RecipeOptions): string {
  return join(recipesDirOf(opts), `${name}.pip.lock`);
}

/** A lock's pins and hashes: requirement lines (backslash continuations joined), `#` comments ignored. */
export function parsePipLock(text: string, file: string): (PipPin & { hashes: string[] })[] {
  const out: (PipPin & { hashes: string[] })[] = [];
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  lines.forEach((line, i) => {
    const words = line.replace(/#.*/, '').trim().split(/\s+/).filter(Boolean);
    if (!words.length) return;
    const pin = pipPin(words[0]!);
    const hashes = words.slice(1).map((w) => /^--hash=sha256:([0-9a-f]{64})$/.exec(w)?.[1]);
    if (!pin || !hashes.length || hashes.some((h) => !h)) {
      throw new RecipeError(file, `line ${i + 1}`, 'expected "name==version --hash=sha256:<64 hex> ..." (regenerate it with drums image pip-lock)');
    }
    if (out.some((o) => o.name === pin.name)) throw new RecipeError(file, `line ${i + 1}`, `${pin.name} is pinned twice`);
    out.push({ ...pin, hashes: hashes as string[] });
  });
  return out;
}

/** The lock of a recipe with pip packages: it must pin exactly the recipe's list. */
function readPipLock(recipe: Recipe, opts?: RecipeOptions): string | undefined {
  if (!recipe.pip.length) return undefined;
  const file = join(recipesDirOf(opts), `${recipe.name}.json`);
  const pins = recipe.pip.map((req, i) => {
    const pin = pipPin(req);
    if (!pin) throw new RecipeError(file, `pip[${i}]`, `${JSON.stringify(req)} must be an exact pin name==version (installs are locked by hash)`);
    return pin;
  });
  const lockFile = pipLockPath(recipe.name, opts);
  if (!existsSync(lockFile)) {
    throw new RecipeError(lockFile, 'pip', `missing: write it with 'bin/drums image pip-lock ${recipe.name}', review it and commit it`);
  }
  const text = readFileSync(lockFile, 'utf8');
  const locked = parsePipLock(text, lockFile);
  const key = (p: PipPin) => `${p.name}==${p.version}`;
  const want = new Set(pins.map(key));
  const have = new Set(locked.map(key));
  const missing = [...want].filter((k) => !have.has(k));
  const extra = [...have].filter((k) => !want.has(k));
  if (missing.length || extra.length) {
    throw new RecipeError(
      lockFile,
      'pip',
      `does not match ${recipe.name}.json's pip list (not locked: ${missing.join(', ') || '-'}; not in the recipe: ${extra.join(', ') || '-'}): run 'bin/drums image pip-lock ${recipe.name}'`,
    );
  }
  return text;
}

/** Loads a recipe with its `from` chain and computes the hashes. */
export function resolveRecipe(name: string, opts?: RecipeOptions, seen: string[] = []): ResolvedRecipe {
  if (seen.includes(name)) {
    throw new RecipeError(join(recipesDirOf(opts), `${seen[seen.length - 1]}.json`), 'base.from', `cycle in "from" chain: ${[...seen, name].join(' -> ')}`);
  }
  let recipe: Recipe;
  try {
    recipe = loadRecipe(name, opts);
  } catch (err) {
    if (seen.length > 0 && err instanceof ImageError && err.code === 'image_not_found') {
      throw new RecipeError(join(recipesDirOf(opts), `${seen[seen.length - 1]}.json`), 'base.from', `parent recipe ${JSON.stringify(name)} does not exist`);
    }
    throw err;
  }
  const parent = isDebootstrapBase(recipe.base) ? undefined : resolveRecipe(recipe.base.from, opts, [...seen, name]);
  const repoRoot = opts?.repoRoot ?? REPO_ROOT;
  const h = createHash('sha256');
  h.update(`drums-image-builder/${BUILDER_VERSION}\n`);
  h.update(canonicalJson(recipe));
  for (const f of recipe.files) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(join(repoRoot, f.src));
    } catch (err) {
      const idx = recipe.files.indexOf(f);
      throw new RecipeError(join(recipesDirOf(opts), `${name}.json`), `files[${idx}].src`, `cannot read ${JSON.stringify(f.src)}: ${(err as Error).message}`);
    }
    h.update(`\nfile ${f.src} ${bytes.length}\n`);
    h.update(bytes);
  }
  const pipLock = readPipLock(recipe, opts);
  if (pipLock !== undefined) {
    h.update(`\npip-lock ${Buffer.byteLength(pipLock)}\n`);
    h.update(pipLock);
  }
  h.update(`\nparent ${parent ? parent.hash : '-'}\n`);
  return { recipe, hash: h.digest('hex'), parent, ...(pipLock !== undefined ? { pipLock } : {}) };
}

/** Full sha256 (hex) of the recipe named `name`; image directories use its first 12 chars. */
export function recipeHash(name: string, opts?: RecipeOptions): string {
  return resolveRecipe(name, opts).hash;
}

/** The Debian suite at the root of a resolved recipe chain. */
export function rootSuite(r: ResolvedRecipe): string {
  let cur = r;
  while (cur.parent) cur = cur.parent;
  const base = cur.recipe.base;
  return isDebootstrapBase(base) ? base.debootstrap.suite : 'unknown';
}
