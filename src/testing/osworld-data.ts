/**
 * Where the tests and benches find OSWorld's data: the task files and an OSWorld checkout. Both are
 * shared test data kept beside the repository, never copied into it, and never found by an
 * absolute path or from the current directory: from the checkout this file is in.
 *
 *   DRUMS_OSWORLD_TASKS     the task directory, one folder per domain (os, chrome, ...):
 *                           OSWorld's evaluation_examples/examples. Default ../shared/osworld-tasks.
 *   DRUMS_OSWORLD_CHECKOUT  an OSWorld checkout (desktop_env, run.py, ...). Default ../shared/osworld-src.
 *
 * ("../shared" is next to the repository root; in a `git worktree` the main checkout's sibling is
 * looked at too.) DRUMS_OSWORLD_SRC is a different thing: `drums osworld run --osworld-src DIR` sets
 * it for its Python driver, and setting it by hand would change what the driver checks.
 * sdk/python/tests/_data.py is the same for pytest.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The repository root (the checkout this file is in). */
export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

/** `../shared` of this checkout, and of the main checkout when this one is a git worktree. */
function sharedCandidates(): string[] {
  const out = [join(REPO_ROOT, '..', 'shared')];
  try {
    const dotGit = join(REPO_ROOT, '.git');
    if (statSync(dotGit).isFile()) {
      // A worktree: `.git` says `gitdir: <main>/.git/worktrees/<name>`, whose `commondir` leads to <main>/.git.
      const gitdir = resolve(REPO_ROOT, /^gitdir: (.+)$/m.exec(readFileSync(dotGit, 'utf8'))![1]!.trim());
      const common = resolve(gitdir, readFileSync(join(gitdir, 'commondir'), 'utf8').trim());
      out.push(join(dirname(common), '..', 'shared'));
    }
  } catch {}
  return [...new Set(out.map((p) => resolve(p)))];
}

function locate(variable: string, rel: string): { path: string; tried: string[]; fromEnv: boolean } {
  const set = process.env[variable];
  if (set) return { path: resolve(REPO_ROOT, set), tried: [resolve(REPO_ROOT, set)], fromEnv: true };
  const tried = sharedCandidates().map((s) => join(s, rel));
  return { path: tried.find((p) => existsSync(p)) ?? tried[0]!, tried, fromEnv: false };
}

const HOW_TASKS =
  "put OSWorld's task files (evaluation_examples/examples of https://github.com/xlang-ai/OSWorld, a folder per domain) in ../shared/osworld-tasks next to the repository, or set DRUMS_OSWORLD_TASKS to such a directory";
const HOW_CHECKOUT =
  'put an OSWorld checkout (git clone https://github.com/xlang-ai/OSWorld) in ../shared/osworld-src next to the repository, or set DRUMS_OSWORLD_CHECKOUT to one';

/** The task directory (one folder per domain). */
export function osworldTasksDir(): string {
  return locate('DRUMS_OSWORLD_TASKS', 'osworld-tasks').path;
}

/** The OSWorld checkout the tests use as a user's `--osworld-src`. */
export function osworldCheckoutDir(): string {
  return locate('DRUMS_OSWORLD_CHECKOUT', 'osworld-src').path;
}

/** Why the task files of `domains` cannot be read (null when they can), saying how to get them. */
export function missingOsworldTasks(domains: string[] = []): string | null {
  const l = locate('DRUMS_OSWORLD_TASKS', 'osworld-tasks');
  const where = l.fromEnv ? `DRUMS_OSWORLD_TASKS=${process.env.DRUMS_OSWORLD_TASKS}` : `tried ${l.tried.join(', ')}`;
  if (!existsSync(l.path)) return `no OSWorld task files at ${l.path} (${where}): ${HOW_TASKS}`;
  const lacking = domains.filter((d) => !existsSync(join(l.path, d)));
  if (lacking.length) return `the OSWorld task directory ${l.path} has no ${lacking.join(', ')} folder (${where}): ${HOW_TASKS}`;
  return null;
}

/** Why the OSWorld checkout cannot be used (null when it can), saying how to get one. */
export function missingOsworldCheckout(): string | null {
  const l = locate('DRUMS_OSWORLD_CHECKOUT', 'osworld-src');
  const where = l.fromEnv ? `DRUMS_OSWORLD_CHECKOUT=${process.env.DRUMS_OSWORLD_CHECKOUT}` : `tried ${l.tried.join(', ')}`;
  if (!existsSync(join(l.path, 'desktop_env', 'desktop_env.py')))
    return `no OSWorld checkout at ${l.path} (no desktop_env/desktop_env.py; ${where}): ${HOW_CHECKOUT}`;
  return null;
}
