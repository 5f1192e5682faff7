import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { badObservation } from '../src/common/osworld-observation.ts';
import { missingOsworldTasks, osworldTasksDir } from '../src/testing/osworld-data.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { renderTable, replaceTable, type TableLevel, type TableRecord, type TaskNeeds } from './osworld-table.ts';
import { quantile } from './stats.ts';

/**
 * `drums bench osworld-run`: the wall time of OSWorld's whole runnable set through
 * `drums osworld run` (the real desktop_env on Drums sessions) at several --parallel levels,
 * one after another on one private daemon, with each task's outcome and the load average.
 *
 * The set is what tests/integration/osworld-domains.test.ts and osworld-tasks.test.ts run: every
 * task file of the given domains, with an empty asset cache of the bench's own. Tasks that need
 * the internet or uncached files, or an app the image lacks, are refused by the driver at once;
 * they are kept in the record with their reason and count in no wall time to speak of. A level
 * that passes its deadline is stopped; the tasks it finished (from the driver's progress lines)
 * are recorded and the level is marked incomplete.
 *
 * With `checkout` (`--checkout [DIR]`, default ../shared/osworld-src) it runs an OSWorld checkout
 * as its users do: the checkout's own task files (evaluation_examples/examples) with its own
 * desktop_env (`drums osworld run --osworld-src`), once per observation type (`--observation`, as
 * run.py's `--observation_type`), and the record holds, per task, what it needs (files, the web, an
 * account, VS Code) and whether it was live, started solved or lost an app after the first
 * observation: the per-domain table of docs/osworld.md (bench/osworld-table.ts; `docs` writes it).
 * `cache` runs from a given asset cache (stand-in files for the cache tasks) instead of an empty one.
 */
export interface OsworldRunBenchOptions {
  /** Default: DRUMS_OSWORLD_TASKS, else ../shared/osworld-tasks next to the repository (src/testing/osworld-data.ts). */
  tasksRoot?: string;
  domains: string[];
  /** Task files instead of domains (tests). */
  files?: string[];
  parallel: number[];
  /** Per-level deadline. */
  levelMinutes: number;
  outDir: string;
  progress?: (msg: string) => void;
  /** An OSWorld checkout: its task files and its desktop_env (`drums osworld run --osworld-src`). */
  checkout?: string;
  /** Observation types, one level each per --parallel level (default: the runner's, a11y_tree). */
  observations?: string[];
  /** The asset cache to run from (read only: e.g. stand-in files); default an empty one per level. */
  cache?: string;
  /** A markdown file whose `osworld-run-table` block gets the record's per-domain table. */
  docs?: string;
}

const DRUMS = fileURLToPath(new URL('../bin/drums', import.meta.url));
const REPO = fileURLToPath(new URL('../', import.meta.url));
/** The driver's per-task progress line: `[i/n] ok  <task> score=<s> <seconds>s  <error>`. */
const LINE = /^\[(\d+)\/(\d+)\] (ok |ERR) (\S+)\s+score=(\S+) ([\d.]+)s(?:\s+(.*))?$/;
const REFUSED = /^needs the internet|that are not in the asset cache|lacks the app/;
const NEWER_DESKTOP_ENV = /module 'desktop_env\.evaluators\.(getters|metrics)' has no attribute/;

export interface TaskOutcome {
  task: string;
  domain: string;
  /** ran-0 / ran-1 (scored before acting: a broken environment) / setup-failed / no-window / lost-app / observation-failed / refused / needs-newer-desktop-env */
  outcome: string;
  score: number | null;
  seconds: number;
  error: string | null;
  /** From the driver's results (absent for a level stopped at its deadline). */
  needs?: TaskNeeds;
  live?: boolean;
  startedSolved?: boolean | null;
  /** The apps the task's setup starts (whose windows are checked). */
  apps?: string[];
  lost?: string[];
  observation?: { ok: boolean; error: string | null; tree_chars: number | null; tree_apps?: string[]; seconds: number } | null;
}

interface DriverResult {
  setup_ok: boolean;
  score: number | null;
  error: string | null;
  missing_windows?: string[];
  lost?: string[];
  observation?: { ok: boolean } | null;
}

function classify(x: DriverResult): string {
  const e = x.error ?? '';
  if (REFUSED.test(e)) return 'refused';
  if (NEWER_DESKTOP_ENV.test(e)) return 'needs-newer-desktop-env';
  if (!x.setup_ok) return 'setup-failed';
  if (x.missing_windows?.length) return 'no-window';
  if (x.lost?.length) return 'lost-app';
  if (x.observation && !x.observation.ok) return 'observation-failed';
  if (x.score === 0) return 'ran-0';
  if (x.score === 1) return 'ran-1';
  return `scored-${x.score}`;
}

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** Runs one level; resolves with the driver's results (or its progress lines on a deadline). */
async function runLevel(
  env: NodeJS.ProcessEnv,
  inputs: string[],
  parallel: number,
  deadlineMs: number,
  progress: (m: string) => void,
  x: { observation?: string; checkout?: string; cache?: string },
): Promise<{ wallSeconds: number; complete: boolean; reason?: string; tasks: TaskOutcome[]; load: number[][] }> {
  const tmp = mkdtempSync('/var/tmp/drums-bench-osworld-run-');
  const out = join(tmp, 'out.json');
  const cache = x.cache ?? join(tmp, 'cache');
  if (!x.cache) mkdirSync(cache);
  const extra = [...(x.observation ? ['--observation', x.observation] : []), ...(x.checkout ? ['--osworld-src', x.checkout] : [])];
  const load: number[][] = [loadavg()];
  const sampler = setInterval(() => load.push(loadavg()), 10_000);
  const seen: TaskOutcome[] = [];
  const t0 = performance.now();
  try {
    const child = spawn(DRUMS, ['osworld', 'run', ...inputs, '--parallel', String(parallel), '--cache', cache, '--out', out, ...extra], {
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
    });
    let buf = '';
    let tail = '';
    child.stderr!.on('data', (d: Buffer) => {
      buf += d.toString();
      tail = (tail + d.toString()).slice(-3000);
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        const m = LINE.exec(line);
        if (!m) continue;
        progress(`${x.observation ?? ''} p${parallel} ${line.slice(0, 120)}`);
        const score = m[5] === 'None' ? null : Number(m[5]);
        const error = m[7] ?? null;
        seen.push({ task: m[4]!, domain: '?', outcome: classify({ setup_ok: m[3] === 'ok ', score, error }), score, seconds: Number(m[6]), error });
      }
    });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      progress(`p${parallel}: deadline of ${deadlineMs / 60_000} min passed; stopping the run`);
      try {
        process.kill(-child.pid!, 'SIGTERM'); // the driver's own process group (detached above)
      } catch {}
    }, deadlineMs);
    const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
    clearTimeout(timer);
    const wallSeconds = (performance.now() - t0) / 1000;
    load.push(loadavg());
    if (!timedOut && code === 0 && existsSync(out)) {
      const rec = JSON.parse(readFileSync(out, 'utf8')) as {
        results: {
          summary: { wall_seconds: number };
          tasks: (DriverResult & {
            task: string;
            file: string;
            seconds: number;
            needs?: TaskNeeds;
            apps?: string[];
            live?: boolean;
            started_solved?: boolean | null;
            observation?: TaskOutcome['observation'];
          })[];
        };
      };
      const tasks = rec.results.tasks.map(
        (t): TaskOutcome => ({
          task: t.task,
          domain: t.file.split('/').at(-2)!,
          outcome: classify(t),
          score: t.score,
          seconds: t.seconds,
          error: t.error,
          needs: t.needs,
          live: t.live,
          startedSolved: t.started_solved,
          lost: t.lost,
          apps: t.apps,
          observation: t.observation
            ? {
                ok: t.observation.ok,
                error: t.observation.error,
                tree_chars: t.observation.tree_chars,
                tree_apps: t.observation.tree_apps,
                seconds: t.observation.seconds,
              }
            : t.observation,
        }),
      );
      return { wallSeconds: rec.results.summary.wall_seconds, complete: true, tasks, load };
    }
    const reason = timedOut
      ? `stopped at the ${deadlineMs / 60_000} min deadline after ${seen.length} tasks`
      : `the driver exited ${code}: ${tail.trim().slice(-800)}`;
    return { wallSeconds, complete: false, reason, tasks: seen, load };
  } finally {
    clearInterval(sampler);
    rmSync(tmp, { recursive: true, force: true });
  }
}

export async function runOsworldRunBench(o: OsworldRunBenchOptions) {
  const started = new Date().toISOString();
  const progress = o.progress ?? (() => {});
  const observations = o.observations?.length ? o.observations : [undefined];
  for (const x of observations) {
    const bad = x === undefined ? null : badObservation(x);
    if (bad) throw new Error(bad);
  }
  const checkout = o.checkout === undefined ? undefined : resolve(o.checkout);
  if (checkout && !existsSync(join(checkout, 'desktop_env', 'desktop_env.py')))
    throw new Error(`--checkout ${checkout} is not an OSWorld checkout: it has no desktop_env/desktop_env.py`);
  const tasksRoot = o.tasksRoot ?? (checkout ? join(checkout, 'evaluation_examples', 'examples') : osworldTasksDir());
  if (!o.files?.length && !o.tasksRoot && !checkout) {
    const why = missingOsworldTasks(o.domains);
    if (why) throw new Error(why);
  }
  const inputs = o.files?.length ? o.files : o.domains.map((d) => join(tasksRoot, d));
  for (const i of inputs) if (!existsSync(i)) throw new Error(`no task file or directory at ${i}`);
  const taskFiles = inputs.flatMap((i) =>
    statSync(i).isDirectory()
      ? readdirSync(i)
          .filter((f) => f.endsWith('.json'))
          .map((f) => join(i, f))
      : [i],
  );
  const domainOf = new Map(
    taskFiles.map((f) => {
      const id = (JSON.parse(readFileSync(f, 'utf8')) as { id?: string }).id ?? '';
      return [id, f.split('/').at(-2)!];
    }),
  );
  const g = gitState();
  // A loaded 2-core host starts LibreOffice or Chrome slowly: the same window wait as the per-domain test.
  const d = await startPrivateDaemon();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DRUMS_URL: d.url,
    DRUMS_TOKEN: d.token,
    DRUMS_OSWORLD_WINDOW_WAIT: process.env.DRUMS_OSWORLD_WINDOW_WAIT ?? '300',
  };
  const levels: (Record<string, unknown> & TableLevel)[] = [];

  const file = join(o.outDir, `osworld-run-${started.replace(/[:.]/g, '-')}.json`);
  const write = (finished: boolean) => {
    const wall = (p: number) => (levels.find((l) => l.parallel === p && l.complete) as { wallSeconds: number } | undefined)?.wallSeconds;
    const ratios: Record<string, number> = {};
    const w1 = wall(1);
    for (const p of o.parallel) if (p !== 1 && w1 && wall(p)) ratios[`p1_over_p${p}`] = round(w1 / wall(p)!, 2);
    const record = {
      schemaVersion: 1,
      kind: 'osworld-run',
      description:
        "Wall time of OSWorld's runnable set through `drums osworld run` (the real desktop_env, provider drums) at each --parallel level, one level after another on one private daemon, with an empty asset cache of the bench's own; every task's outcome per level, and the load average sampled every 10 s.",
      command: `bin/drums bench osworld-run${checkout ? ` --checkout ${o.checkout}` : ''}${o.observations?.length ? ` --observations ${o.observations.join(',')}` : ''}${o.cache ? ` --cache ${o.cache}` : ''} --parallel ${o.parallel.join(',')}${o.files?.length ? ` ${o.files.join(' ')}` : ` --domains ${o.domains.join(',')}`}`,
      commit: g.commit,
      dirty: g.dirty,
      started,
      finished: finished ? new Date().toISOString() : null,
      complete: finished && levels.length === observations.length * o.parallel.length && levels.every((l) => l.complete),
      host: hostFacts(),
      config: {
        tasksRoot,
        domains: o.files?.length ? null : o.domains,
        files: o.files ?? null,
        parallel: o.parallel,
        levelMinutes: o.levelMinutes,
        taskFiles: taskFiles.length,
        checkout: checkout ?? null,
        observations: o.observations ?? null,
        cache: o.cache ?? null,
      },
      levels,
      ratios,
      notes: [
        "wallSeconds: the driver's own wall time, first task start to last task end (or, for a stopped level, the bench's time until the stop)",
        'outcome: ran-0 = set up, its apps mapped windows, scored 0.0 before acting (as it should); ran-1 = scored 1.0 before acting (a broken environment); refused = needs the internet, uncached files or an app the image lacks, refused at once; needs-newer-desktop-env = a getter or metric that desktop-env 1.0.2 lacks; no-window / setup-failed are failures',
        'a 2-core machine shared with other engineers: compare levels through their ratios and read them with the load average',
        "per task (from the driver): needs = what it needs beyond this host (files from OSWorld's store, the web, a Google account, VS Code); live = set up, and its apps' windows up after the first observation of the level's observation type; startedSolved = scored other than 0.0 before acting; lost = apps whose window was gone after that observation; lost-app and observation-failed are failures",
      ],
    };
    mkdirSync(o.outDir, { recursive: true });
    writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
    return record;
  };
  try {
    for (const [observation, p] of observations.flatMap((ob) => o.parallel.map((q) => [ob, q] as const))) {
      progress(`--parallel ${p}${observation ? `, --observation ${observation}` : ''}: ${taskFiles.length} task files`);
      const r = await runLevel(env, inputs, p, o.levelMinutes * 60_000, progress, { observation, checkout, cache: o.cache });
      for (const t of r.tasks) if (t.domain === '?') t.domain = domainOf.get(t.task) ?? '?';
      const count = (k: string) => r.tasks.filter((t) => t.outcome === k).length;
      const ran = r.tasks.filter((t) => t.outcome !== 'refused' && t.outcome !== 'needs-newer-desktop-env');
      const l1 = r.load.map((x) => x[0]!);
      levels.push({
        parallel: p,
        ...(observation ? { observation } : {}),
        complete: r.complete,
        ...(r.reason ? { reason: r.reason } : {}),
        wallSeconds: round(r.wallSeconds),
        summary: {
          taskFiles: taskFiles.length,
          finished: r.tasks.length,
          ran: ran.length,
          ran0: count('ran-0'),
          ran1: count('ran-1'),
          noWindow: count('no-window'),
          live: r.tasks.filter((t) => t.live).length,
          startedSolved: r.tasks.filter((t) => t.startedSolved).length,
          lostApp: count('lost-app'),
          observationFailed: count('observation-failed'),
          setupFailed: count('setup-failed'),
          refused: count('refused'),
          needsNewerDesktopEnv: count('needs-newer-desktop-env'),
          taskSecondsP50: ran.length
            ? round(
                quantile(
                  ran.map((t) => t.seconds),
                  0.5,
                ),
              )
            : null,
          taskSecondsSum: round(ran.reduce((a, t) => a + t.seconds, 0)),
        },
        loadavg: { first: r.load[0], last: r.load.at(-1), load1Median: round(quantile(l1, 0.5), 2), load1Max: Math.max(...l1), samples: r.load.length },
        tasks: r.tasks,
      });
      write(false);
      progress(
        `--parallel ${p}${observation ? ` ${observation}` : ''}: ${round(r.wallSeconds)} s, ${ran.length} ran (${count('ran-0')} scored 0.0), ${count('refused')} refused${r.complete ? '' : `; INCOMPLETE: ${r.reason}`}`,
      );
    }
  } finally {
    await d.stop();
  }
  const record = write(true);
  if (o.docs) {
    const rel = relative(REPO, file);
    writeFileSync(o.docs, replaceTable(readFileSync(o.docs, 'utf8'), renderTable(record as unknown as TableRecord, rel)));
    progress(`wrote the per-domain table of ${rel} into ${o.docs}`);
  }
  return { record, file };
}
