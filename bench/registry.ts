/**
 * The bench's one registry of commands: `drums bench <name>` for each record bench below (BENCHES),
 * and `drums bench run <experiment>` (RUN) for each experiment of experiments.ts (arms interleaved
 * over trials, bars in bench/bars/), all registered by the CLI from here; `drums bench preregister`
 * (freezing an experiment's bars, bars.ts) is the CLI's own. tests/unit/bench-registry.test.ts
 * checks the CLI's commands and options against these entries and docs/bench.md's command column.
 */
import type { DrumsClient } from '../src/client/client.ts';
import type { StartInProcess } from './api-bench.ts';
import type { FrameProfileOptions } from './frame-profile.ts';
import type { StepFormat } from './steps-bench.ts';

export { EXPERIMENTS } from './experiments.ts';

export type Opts = Record<string, string | boolean | undefined>;
type Bars = Record<string, { pass: boolean; value: unknown; bar: unknown }>;

/**
 * One record-writing benchmark, declared once: its `drums bench <name>` command (description,
 * argument, commander flags with their defaults), how it runs, and what it prints before the
 * `record: <file>` line that every one ends with. The CLI (src/cli/commands/bench.ts) registers
 * each entry as it stands; adding a bench is one entry here and its module.
 */
export interface RecordBench {
  name: string;
  description: string;
  argument?: [name: string, description: string];
  options: [flags: string, description: string, dflt?: string][];
  /** Run against the CLI's withDaemon() client (DRUMS_URL, else a private daemon). */
  daemon?: boolean;
  /**
   * `[bench] message` lines (log), one rewritten stderr line with a newline at the end (line, or its
   * tag), or `[12s] message` (elapsed: one rewritten line on a terminal, lines otherwise).
   */
  progress: 'log' | 'line' | { line: string; newline: boolean } | 'elapsed';
  run(o: Opts, ctx: BenchContext): Promise<{ record: unknown; file: string }>;
  /** Lines for people before `record: ...`; default: the record's bars as PASS/FAIL lines. */
  report?: (record: never) => string;
  /** The process's exit code once the record is written (default: 0). */
  exitCode?: (record: never) => number;
}

/**
 * What a bench gets from its caller. `host` holds the two pieces of the daemon's own tree that a
 * bench measures in-process and bench/ may not import (src/layers.json): the CLI, which may import
 * anything, hands them in.
 */
export interface BenchContext {
  progress: (m: string) => void;
  client?: DrumsClient;
  args: string[];
  host: BenchHost;
}
export interface BenchHost {
  /** `drums bench api`: a daemon in this process, to time the HTTP path against a direct call. */
  startInProcess: StartInProcess;
  /** `drums bench frame-profile`: the candidate PNG encoders on one frame (src/display/encoder-compare.ts). */
  compareEncoders: NonNullable<FrameProfileOptions['compare']>;
}

const OUT: [string, string, string] = ['--out <dir>', 'record directory', 'bench/records'];
const JSON_OPT: [string, string] = ['--json', 'print the record'];
const IMAGE = (dflt: string): [string, string, string] => ['--image <name>', 'image', dflt];
const num = (v: unknown) => Number(v);
/** A number of seconds >= 0, or an error that names the option. */
const seconds = (v: unknown, name: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}: expected seconds >= 0, got ${String(v)}`);
  return n;
};
const list = (v: unknown) => String(v).split(',').map(Number);
/** One `PASS|FAIL  name value (bar b)` line per bar of a bench record: the default report. */
export const barLines = (r: { bars: Bars }) =>
  Object.entries(r.bars)
    .map(([k, v]) => `${v.pass ? 'PASS' : 'FAIL'}  ${k.padEnd(26)} ${v.value} (bar ${v.bar})\n`)
    .join('');
const bars = barLines;

/** The record benches, in the order `drums bench --help` lists them. */
export const BENCHES: RecordBench[] = [
  {
    name: 'osworld-run',
    description:
      "OSWorld's task set through `drums osworld run` at each --parallel level (and, with --checkout, each observation type of an OSWorld checkout: the per-domain table of docs/osworld.md), with each task's outcome and the load average",
    argument: ['[files...]', 'task files instead of --domains'],
    options: [
      ['--tasks-root <dir>', 'OSWorld task files, a directory per domain (default: $DRUMS_OSWORLD_TASKS, else ../shared/osworld-tasks next to the repository)'],
      [
        '--domains <list>',
        'domains (default os,chrome,gimp,libreoffice_calc,libreoffice_impress,libreoffice_writer,vlc,thunderbird,multi_apps; with --checkout, every domain of the checkout)',
      ],
      [
        '--checkout [dir]',
        'run an OSWorld checkout as its users do: its own task files and desktop_env (default dir: $DRUMS_OSWORLD_CHECKOUT, else ../shared/osworld-src next to the repository)',
      ],
      ['--observations <list>', 'observation types, a level each (default: a11y_tree; with --checkout, screenshot,a11y_tree,screenshot_a11y_tree,som)'],
      ['--cache <dir>', 'run from this asset cache (stand-in files for the cache tasks, say; never written) instead of an empty one'],
      ['--docs <file>', "write the record's per-domain table into this file's osworld-run-table block (docs/osworld.md)"],
      ['--parallel <list>', 'levels, run one after another (default 1,4,8; with --checkout, 4)'],
      ['--level-minutes <n>', 'stop a level after this long and record what it finished', '30'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress, args }) => {
      const { runOsworldRunBench } = await import('./osworld-run-bench.ts');
      const { OBSERVATIONS } = await import('../src/common/osworld-observation.ts');
      const { osworldCheckoutDir, missingOsworldCheckout } = await import('../src/testing/osworld-data.ts');
      let checkout: string | undefined;
      if (o.checkout === true) {
        const why = missingOsworldCheckout();
        if (why) throw new Error(why);
        checkout = osworldCheckoutDir();
      } else if (o.checkout !== undefined) checkout = String(o.checkout);
      const domains = o.domains
        ? String(o.domains).split(',')
        : checkout
          ? (await import('node:fs'))
              .readdirSync(`${checkout}/evaluation_examples/examples`, { withFileTypes: true })
              .filter((e) => e.isDirectory())
              .map((e) => e.name)
              .sort()
          : ['os', 'chrome', 'gimp', 'libreoffice_calc', 'libreoffice_impress', 'libreoffice_writer', 'vlc', 'thunderbird', 'multi_apps'];
      return runOsworldRunBench({
        tasksRoot: o.tasksRoot === undefined ? undefined : String(o.tasksRoot),
        domains,
        files: args,
        parallel: list(o.parallel ?? (checkout ? '4' : '1,4,8')),
        levelMinutes: num(o.levelMinutes),
        outDir: String(o.out),
        checkout,
        observations: o.observations ? String(o.observations).split(',') : checkout ? [...OBSERVATIONS] : undefined,
        cache: o.cache === undefined ? undefined : String(o.cache),
        docs: o.docs === undefined ? undefined : String(o.docs),
        progress,
      });
    },
    report: (record: {
      levels: {
        parallel: number;
        observation?: string;
        wallSeconds: number;
        complete: boolean;
        summary: { ran: number; live: number; startedSolved: number; lostApp: number };
      }[];
    }) =>
      record.levels
        .map(
          (l) =>
            `--parallel ${l.parallel}${l.observation ? ` ${l.observation}` : ''}: ${l.wallSeconds} s, ${l.summary.ran} tasks ran, ${l.summary.live} live, ${l.summary.startedSolved} started solved, ${l.summary.lostApp} lost an app${l.complete ? '' : ' (incomplete)'}\n`,
        )
        .join(''),
  },
  {
    name: 'pools',
    description: 'warm-pool claims vs creates, disk fork(N) vs N creates, and the idle cost of a pool, in one run',
    options: [
      IMAGE('default'),
      ['--url <url>', 'URL the sessions open', 'about:blank'],
      ['--claims <n>', 'claims (and creates) to time', '20'],
      ['--pool-size <n>', 'pool size for the idle cost', '8'],
      ['--forks <list>', 'fork counts', '1,4,8'],
      ['--app <name>', "an app the fork source and each fresh create open first: 'writer' (a document in LibreOffice Writer; --image osworld)", ''],
      ['--idle-seconds <n>', 'idle measurement window', '10'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./pools-bench.ts')).runPoolsBench({
        image: String(o.image),
        url: (o.url as string) || undefined,
        claims: num(o.claims),
        poolSize: num(o.poolSize),
        forkCounts: list(o.forks),
        ...(o.app === 'writer' ? { app: 'writer' as const } : {}),
        idleSeconds: num(o.idleSeconds),
        outDir: String(o.out),
        progress,
      }),
    report: (record: { claims: { claimMs: { p50: number }; createMs: { p50: number } }; bars: { claimP50Ms: { pass: boolean } } }) =>
      `claim p50 ${record.claims.claimMs.p50.toFixed(2)} ms vs create p50 ${record.claims.createMs.p50.toFixed(0)} ms; ${record.bars.claimP50Ms.pass ? 'PASS' : 'FAIL'} claimP50Ms (bar <= 20)\n`,
  },
  {
    name: 'standby',
    description:
      'reset of a session served by a standby (spec standbys: 1) vs the same session without one, interleaved, optionally with sessions held; and what a standby costs idle (memory, CPU)',
    options: [
      IMAGE('default'),
      ['--url <url>', 'URL the sessions open (Chromium starts with it)', 'data:text/html,<h1>reset</h1>'],
      ['--resets <n>', 'resets per arm', '20'],
      ['--held <n>', 'sessions held open during the run', '0'],
      ['--held-image <name>', 'image of the held sessions', 'default'],
      // Held sessions only wait: a small disk each lets --held 100 pass disk admission (100 x the default 512 MiB did not).
      ['--held-disk-mb <n>', "each held session's diskMb (its writable layer)", '128'],
      ['--idle-seconds <n>', "window for the standby's idle cost", '10'],
      ['--settle-ms <n>', "wait after each refill (the old generation's teardown)", '2000'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./standby-bench.ts')).runStandbyBench({
        image: String(o.image),
        url: (o.url as string) || undefined,
        resets: num(o.resets),
        held: num(o.held),
        heldImage: String(o.heldImage),
        heldDiskMb: num(o.heldDiskMb),
        idleSeconds: num(o.idleSeconds),
        settleMs: num(o.settleMs),
        outDir: String(o.out),
        progress,
      }),
    report: (record: {
      resets: { standby: { ms: { p50: number; p99: number } }; none: { ms: { p50: number; p99: number } } };
      bars: { standbyResetP50Ms: { pass: boolean } };
    }) =>
      `reset p50/p99: standby ${record.resets.standby.ms.p50.toFixed(1)}/${record.resets.standby.ms.p99.toFixed(1)} ms, none ${record.resets.none.ms.p50.toFixed(0)}/${record.resets.none.ms.p99.toFixed(0)} ms; ${record.bars.standbyResetP50Ms.pass ? 'PASS' : 'FAIL'} standbyResetP50Ms (bar <= 150)\n`,
  },
  {
    name: 'zygote',
    description:
      'Chromium without its zygote (--no-zygote, which a memory fork needs; the default without a user namespace) against Chromium with it (DRUMS_BROWSER_ZYGOTE=1): create-to-ready, create-to-paint, memory and processes per session, and a memory fork of each, side by side in one run',
    options: [IMAGE('default'), ['--sessions <n>', 'sessions per arm', '6'], ['--settle-seconds <n>', 'wait before memory is read', '10'], OUT],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./zygote-bench.ts')).runZygoteBench({
        image: String(o.image),
        sessions: num(o.sessions),
        settleSeconds: num(o.settleSeconds),
        outDir: String(o.out),
        progress,
      }),
    report: (record: { ratios: unknown }) => `no-zygote / zygote, medians: ${JSON.stringify(record.ratios)}\n`,
  },
  {
    name: 'userns',
    description: 'the cost of a user namespace per session against host uids: create, reset, memory and disk, side by side in one run',
    options: [
      IMAGE('default'),
      ['--url <url>', 'URL the sessions open (Chromium: its sandbox runs in the userns arm)', 'about:blank'],
      ['--sessions <n>', 'sessions per arm', '6'],
      ['--settle-seconds <n>', 'wait before memory is read', '10'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./userns-bench.ts')).runUsernsBench({
        image: String(o.image),
        url: (o.url as string) || undefined,
        sessions: num(o.sessions),
        settleSeconds: num(o.settleSeconds),
        outDir: String(o.out),
        progress,
      }),
    report: (record: { ratios: unknown }) => `userns / host uids, medians: ${JSON.stringify(record.ratios)}\n`,
  },
  {
    name: 'api',
    description: 'API overhead over a direct in-process call, and actions/s with 16 clients on 16 sessions',
    options: [
      ['--quick', 'fewer samples, shorter run (CI)'],
      IMAGE('minimal'),
      ['--clients <n>', 'concurrent clients = sessions', '16'],
      ['--seconds <n>', 'throughput run length'],
      OUT,
      JSON_OPT,
    ],
    progress: 'log',
    run: async (o, { progress, host }) =>
      (await import('./api-bench.ts')).runApiBench({
        quick: !!o.quick,
        image: String(o.image),
        outDir: String(o.out),
        clients: num(o.clients),
        seconds: Number(o.seconds ?? (o.quick ? 5 : 20)),
        progress,
        startInProcess: host.startInProcess,
      }),
    report: bars,
  },
  {
    name: 'noisy',
    description:
      'noisy neighbour: 8 sessions driven in a closed loop while one abuses CPU, memory, pids, disk and the API; ratios against quiet phases of the same run',
    options: [
      ['--quick', 'short phases (CI)'],
      ['--victims <n>', 'sessions driven in a closed loop', '8'],
      ['--seconds <n>', 'length of each phase (default 20, 5 with --quick)'],
      ['--rounds <n>', 'times each abuse runs (the bars take the median ratio over them)'],
      ['--abuses <list>', 'comma-separated abuses to run, in order (default: cpu,memory,fork,disk,flood; idle, a control, runs only sleep)'],
      ['--userns-sessions <n>', 'sessions per arm of the user-namespace cost measured in the same run (0: skip; default 3, 0 with --quick)'],
      ['--warmup <s>', "the longest warm-up before the first phase: the victims' loop runs until its step rate stops rising (default 300, 20 with --quick)"],
      ['--warmup-min <s>', 'the shortest warm-up (default 150, 0 with --quick)'],
      [
        '--harness <where>',
        "where the harness and the victims' clients run: client (the instance's client CPU cgroup, the default) or root (the host's root cgroup, where a trainer runs)",
        'client',
      ],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) => {
      if (o.harness !== 'root' && o.harness !== 'client') throw new Error('--harness: choose root or client');
      const noisy = await import('./noisy-bench.ts');
      return noisy.runNoisyBench({
        quick: !!o.quick,
        outDir: String(o.out),
        victims: num(o.victims),
        seconds: Number(o.seconds ?? (o.quick ? 5 : 20)),
        rounds: Number(o.rounds ?? (o.quick ? 1 : 3)),
        usernsSessions: Number(o.usernsSessions ?? (o.quick ? 0 : 3)),
        warmupS: seconds(o.warmup ?? (o.quick ? 20 : 300), '--warmup'),
        warmupMinS: seconds(o.warmupMin ?? (o.quick ? 0 : 150), '--warmup-min'),
        abuses: o.abuses === undefined ? undefined : noisy.parseAbuses(String(o.abuses)),
        harness: o.harness,
        progress,
      });
    },
    report: bars,
  },
  {
    name: 'soak',
    description: 'soak: sessions driven for many steps with periodic resets; daemon RSS and fds must stay flat, 0 errors, 0 residue',
    options: [
      ['--quick', 'a short soak (CI)'],
      ['--sessions <n>', 'sessions, one client each', '16'],
      ['--steps <n>', 'steps per session', '1000'],
      ['--reset-every <n>', 'reset each session every this many steps', '50'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./soak-bench.ts')).runSoakBench({
        quick: !!o.quick,
        outDir: String(o.out),
        sessions: o.quick ? 2 : num(o.sessions),
        steps: o.quick ? 100 : num(o.steps),
        resetEvery: num(o.resetEvery),
        progress,
      }),
    report: bars,
  },
  {
    name: 'rss',
    description: "what holds the daemon's RSS: N sessions, one screenshot each, then destroyed; per-session deltas by kind",
    options: [['--sessions <n>', 'sessions', '20'], ['--screen <WxH>', 'screen size', '1280x800'], OUT],
    progress: { line: 'bench', newline: false },
    run: async (o, { progress }) =>
      (await import('./soak-bench.ts')).runRssProbe({ sessions: num(o.sessions), screen: String(o.screen), outDir: String(o.out), progress }),
    report: (record: { perSessionMiB: unknown }) => `\n${JSON.stringify(record.perSessionMiB)}\n`,
  },
  {
    name: 'sessions',
    description: 'lifecycle latency and memory per added session, against the session-core bars',
    options: [
      ['--quick', 'a few sessions, few runs (CI)'],
      IMAGE('default'),
      ['--runs <n>', 'sequential runs per latency'],
      ['--n <list>', 'session counts for the memory slope, e.g. 1,4,8,12,16'],
      OUT,
      JSON_OPT,
    ],
    daemon: true,
    progress: 'line',
    run: async (o, { progress, client }) =>
      (await import('./sessions-bench.ts')).runSessionsBench({
        client: client!,
        image: String(o.image),
        quick: !!o.quick,
        outDir: String(o.out),
        runs: Number(o.runs ?? (o.quick ? 3 : 10)),
        memoryNs: list(o.n ?? (o.quick ? '1,2,3' : '1,4,8,12,16')),
        settleMs: o.quick ? 1000 : 5000,
        progress,
      }),
    report: bars,
  },
  {
    name: 'a11y-osworld',
    description:
      "OSWorld's observations per app through a checkout's desktop_env at 1920x1080, each app opened by a task's setup on stand-in files: the first observation after reset (screenshot + tree) p50/p99, the tree's size and read time alone and with N sessions at once",
    options: [
      ['--checkout <dir>', 'an OSWorld checkout (default: $DRUMS_OSWORLD_CHECKOUT, else ../shared/osworld-src next to the repository)'],
      ['--apps <list>', 'apps (chrome,vlc,calc,writer,impress,gimp,thunderbird,os)', 'chrome,vlc,calc,writer,impress,gimp,thunderbird,os'],
      ['--rounds <n>', 'resets per app (first observation p50/p99)', '20'],
      ['--reads <n>', 'tree reads in a row alone, and rounds of reads at once', '20'],
      ['--sessions <n>', 'sessions of each app read at once (0: skip)', '10'],
      ['--screen <WxH>', 'screen size', '1920x1080'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) => {
      const { runA11yOsworldBench } = await import('./a11y-osworld-bench.ts');
      const { osworldCheckoutDir, missingOsworldCheckout } = await import('../src/testing/osworld-data.ts');
      if (o.checkout === undefined) {
        const why = missingOsworldCheckout();
        if (why) throw new Error(why);
      }
      return runA11yOsworldBench({
        checkout: o.checkout === undefined ? osworldCheckoutDir() : String(o.checkout),
        apps: String(o.apps).split(','),
        rounds: num(o.rounds),
        reads: num(o.reads),
        sessions: num(o.sessions),
        screen: String(o.screen),
        outDir: String(o.out),
        progress,
      });
    },
    report: (record: { complete: boolean; results: { apps: Record<string, unknown> } | null }) =>
      `${JSON.stringify(record.results?.apps ?? {}, (k, v) => (k === 'resets' ? undefined : v), 1)}\n${record.complete ? 'complete' : 'INCOMPLETE'}\n`,
  },
  {
    name: 'osworld-scripts',
    description:
      "OSWorld's run.py and run_multienv.py --num_envs 4 from a checkout, unchanged, over a few os tasks under each observation type, with a loopback model double: what each run left (traj.jsonl, screenshots, result.txt, recording.mp4) and its wall time",
    options: [
      ['--checkout <dir>', 'an OSWorld checkout (default: $DRUMS_OSWORLD_CHECKOUT, else ../shared/osworld-src next to the repository)'],
      ['--observations <list>', 'observation types, a run of each script each', 'screenshot,a11y_tree,screenshot_a11y_tree,som'],
      ['--scripts <list>', 'run (run.py), multienv (scripts/python/run_multienv.py --num_envs 4)', 'run,multienv'],
      ['--tasks <list>', 'os task ids the model double has a script for (default: three that it solves)'],
      ['--screen <WxH>', "the scripts' --screen_width/--screen_height", '1920x1080'],
      ['--at-once <n>', "runs at a time (2: an observation type's run.py and run_multienv.py together)", '2'],
      ['--timeout-minutes <n>', 'stop the runs after this long (runs not started are recorded as such)', '60'],
      OUT,
    ],
    progress: 'log',
    run: async (o, { progress }) => {
      const { runOsworldScriptsBench } = await import('./osworld-scripts-bench.ts');
      const { osworldCheckoutDir, missingOsworldCheckout } = await import('../src/testing/osworld-data.ts');
      if (o.checkout === undefined) {
        const why = missingOsworldCheckout();
        if (why) throw new Error(why);
      }
      return runOsworldScriptsBench({
        checkout: o.checkout === undefined ? osworldCheckoutDir() : String(o.checkout),
        observations: String(o.observations).split(','),
        scripts: String(o.scripts).split(','),
        tasks: o.tasks ? String(o.tasks).split(',') : undefined,
        screen: String(o.screen),
        timeoutMinutes: num(o.timeoutMinutes),
        atOnce: num(o.atOnce),
        outDir: String(o.out),
        progress,
      });
    },
    report: (record: {
      complete: boolean;
      results: { runs: { run: string; wall_seconds: number; finished: boolean; tasks_with_all_files: number }[] } | null;
    }) =>
      `${(record.results?.runs ?? []).map((r) => `${r.run}: ${r.finished ? 'finished' : 'NOT finished'}, ${r.tasks_with_all_files} task(s) left every file, ${r.wall_seconds} s`).join('\n')}\n${record.complete ? 'complete' : 'INCOMPLETE'}\n`,
  },
  {
    name: 'a11y',
    description:
      'accessibility-tree read p50/p99 through the API, reference walk vs fast read vs event mirror: per app with a file open, the 7-app desktop alone and N sessions at once',
    options: [
      ['--reads <n>', 'reads of each kind per measurement', '20'],
      ['--sessions <n>', 'sessions with the 7-app desktop read at once (0: skip)', '10'],
      [
        '--apps <list>',
        'apps of the per-app arm (calc,gimp,thunderbird,chromium,nautilus,gedit,evince; none: skip)',
        'calc,gimp,thunderbird,chromium,nautilus,gedit,evince',
      ],
      ['--no-desktop', 'skip the 7-app desktop alone'],
      OUT,
      JSON_OPT,
    ],
    daemon: true,
    progress: 'log',
    run: async (o, { progress, client }) =>
      (await import('./a11y-bench.ts')).runA11yBench({
        client: client!,
        reads: num(o.reads),
        sessions: num(o.sessions),
        apps: String(o.apps) === 'none' ? [] : String(o.apps).split(','),
        desktop: o.desktop !== false,
        outDir: String(o.out),
        progress,
      }),
    report: (record: { results: Record<string, unknown> }) => `${JSON.stringify(record.results, null, 1)}\n`,
  },
  {
    name: 'ops',
    description: 'observe/act latency through the API vs exec-spawned tools, and N sessions driven at once',
    options: [
      ['--quick', 'few runs, 4 sessions (CI)'],
      ['--runs <n>', 'runs per measurement'],
      ['--sessions <n>', 'sessions driven at once', '16'],
      ['--seconds <n>', 'how long to drive them', '10'],
      OUT,
      JSON_OPT,
    ],
    daemon: true,
    progress: 'line',
    run: async (o, { progress, client }) =>
      (await import('./ops-bench.ts')).runOpsBench({
        client: client!,
        quick: !!o.quick,
        outDir: String(o.out),
        runs: Number(o.runs ?? (o.quick ? 10 : 30)),
        sessions: o.quick ? Math.min(4, num(o.sessions)) : num(o.sessions),
        parallelSeconds: o.quick ? 5 : num(o.seconds),
        progress,
      }),
    report: (record: { results: Record<string, Record<string, { p50?: number; p95?: number } | number>> }) => {
      const r = record.results;
      let out = '';
      for (const group of ['api', 'peers']) {
        for (const [k, v] of Object.entries(r[group] ?? {}))
          out += `${group.padEnd(6)} ${k.padEnd(32)} p50 ${(v as { p50: number }).p50.toFixed(1).padStart(8)} ms  p95 ${(v as { p95: number }).p95.toFixed(1).padStart(8)} ms\n`;
      }
      return `${out}ratios ${JSON.stringify(r.ratios)}\nparallel ${JSON.stringify(r.parallel)}\n`;
    },
  },
  {
    name: 'steps',
    description:
      'step throughput (click + screenshot) of this checkout vs its ceiling (stored frames: no capture, no encode) and another checkout, in the same run, at each screen size and format; CPU per step by format; streaming',
    options: [
      ['--base <dir>', 'checkout of the code to compare with (e.g. git worktree add DIR 4c106a9), with node_modules and .runtime'],
      ['--sessions <list>', 'N ladder of Chromium sessions', '10,50,100'],
      ['--screens <list>', "the sessions' screen sizes; every arm runs at each", '1280x800,1920x1080'],
      ['--formats <list>', 'screenshot formats of the closed-loop step (png, jpeg)', 'png,jpeg'],
      ['--no-ceiling', "leave out the ceiling arm (this checkout's daemon with DRUMS_BENCH_STORED_FRAME=1)"],
      ['--clients <n>', 'closed-loop clients', '8'],
      ['--seconds <n>', 'seconds per measurement', '20'],
      ['--offered <n>', 'open-loop offered steps/s', '50'],
      ['--trials <n>', 'trials (arms alternate, order rotated)', '1'],
      ['--quick', 'N=2, 4 s (a harness check)'],
      OUT,
    ],
    progress: 'line',
    run: async (o, { progress }) => {
      const { runStepsBench, CEILING_ARM } = await import('./steps-bench.ts');
      const { resolve, join } = await import('node:path');
      const here = resolve(import.meta.dirname, '..');
      const arms: { name: string; bin: string; description: string; env?: NodeJS.ProcessEnv }[] = [
        { name: 'frames', bin: join(here, 'bin', 'drums'), description: `this checkout (${here})` },
      ];
      if (o.ceiling !== false)
        arms.push({
          name: CEILING_ARM,
          bin: join(here, 'bin', 'drums'),
          description: 'this checkout with DRUMS_BENCH_STORED_FRAME=1: stored frames, no capture or encode (the ceiling)',
          env: { DRUMS_BENCH_STORED_FRAME: '1' },
        });
      if (o.base) arms.push({ name: 'base', bin: join(resolve(String(o.base)), 'bin', 'drums'), description: `the checkout at ${resolve(String(o.base))}` });
      const screens = String(o.screens)
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);
      for (const sc of screens) if (!/^\d{3,5}x\d{3,5}$/.test(sc)) throw new Error(`--screens: '${sc}' is not WxH`);
      const formats = String(o.formats)
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);
      for (const f of formats) if (f !== 'png' && f !== 'jpeg') throw new Error(`--formats: '${f}' is not png or jpeg`);
      return runStepsBench({
        arms,
        screens,
        formats: formats as StepFormat[],
        sessions: o.quick ? [2] : list(o.sessions),
        clients: o.quick ? 2 : num(o.clients),
        seconds: o.quick ? 4 : num(o.seconds),
        offered: o.quick ? 5 : num(o.offered),
        trials: num(o.trials),
        quick: !!o.quick,
        outDir: String(o.out),
        command: `bin/drums ${process.argv.slice(2).join(' ')}`,
        progress,
      });
    },
    report: (record: { summary: string }) => `${record.summary}\n`,
  },
  {
    name: 'frame-profile',
    description:
      'where each millisecond of a step goes (actions, cursor, grab, draw, colour, encode, HTTP) at each screen size, one request at a time; cold full-frame PNGs; candidate PNG encoders on one frame',
    options: [['--screens <list>', 'screen sizes', '1280x800,1920x1080'], ['--steps <n>', 'steps per format and screen', '200'], OUT],
    progress: 'line',
    run: async (o, { progress, host }) => {
      const { runFrameProfile } = await import('./frame-profile.ts');
      return runFrameProfile({
        screens: String(o.screens).split(','),
        steps: num(o.steps),
        outDir: String(o.out),
        command: `bin/drums ${process.argv.slice(2).join(' ')}`,
        progress,
        compare: host.compareEncoders,
      });
    },
    report: (record: { screens: Record<string, unknown> }) => `${JSON.stringify(record.screens, null, 1)}\n`,
  },
  {
    name: 'episodes',
    description:
      "the cost of recording (docs/episodes.md): at each N, sessions not recorded, recorded (actions only), and with frames at 2 and 10 fps, stepped in the same run: steps/s, p99, the daemon's CPU and disk bytes per session-minute; then the export time and size of one episode",
    options: [
      ['--ns <list>', 'session counts', '40,100'],
      ['--seconds <n>', 'seconds each arm steps at each N', '60'],
      ['--trials <n>', 'trials per N (the arms turn round each)', '3'],
      ['--export-steps <n>', 'steps of the exported episode', '100'],
      ['--disk-mb <n>', "each stepped session's diskMb (admission counts every session's whole quota against the free disk)", '128'],
      IMAGE('minimal'),
      OUT,
      JSON_OPT,
    ],
    progress: 'log',
    run: async (o, { progress }) =>
      (await import('./episodes-bench.ts')).runEpisodesBench({
        ns: list(o.ns),
        seconds: seconds(o.seconds, '--seconds'),
        trials: num(o.trials),
        exportSteps: num(o.exportSteps),
        diskMb: num(o.diskMb),
        image: String(o.image),
        outDir: String(o.out),
        progress,
      }),
    report: (record: { summary: unknown; export: unknown; bars: unknown }) =>
      `${JSON.stringify(record.summary, null, 1)}\nexport: ${JSON.stringify(record.export)}\nbars: ${JSON.stringify(record.bars)}\n`,
  },
  {
    name: 'density',
    description: 'how many Chromium sessions the host holds at once (bar: 50)',
    options: [['--sessions <n>', 'sessions to hold', '50'], ['--concurrency <n>', 'creates in flight', '4'], IMAGE('default'), OUT],
    daemon: true,
    progress: { line: 'density', newline: true },
    run: async (o, { progress, client }) =>
      (await import('./density-bench.ts')).runDensityBench({
        client: client!,
        image: String(o.image),
        sessions: num(o.sessions),
        concurrency: num(o.concurrency),
        outDir: String(o.out),
        progress,
      }),
    report: (record: { bars: { concurrentBrowserSessions: { pass: boolean; value: unknown; bar: unknown } }; results: { hostUsedMiB: unknown } }) => {
      const b = record.bars.concurrentBrowserSessions;
      return `${b.pass ? 'PASS' : 'FAIL'}  concurrent Chromium sessions ${b.value} (bar >= ${b.bar}); host used ${JSON.stringify(record.results.hostUsedMiB)} MiB\n`;
    },
  },
];

/**
 * `drums bench run <experiment>`: any experiment of experiments.ts (adding one is an entry there, its
 * arms in arms.ts), arms interleaved over trials, warm-ups discarded.
 */
export const RUN: RecordBench = {
  name: 'run',
  description: 'run an experiment: arms interleaved over trials, warm-ups discarded; writes a record to bench/records',
  argument: ['<experiment>', 'baseline | density | vs-peer | memory-arms | episodes | ...'],
  options: [
    ['--quick', 'few sessions, one trial (CI)'],
    ['--trials <n>', 'measured trials per arm'],
    ['--arms <list>', "comma-separated subset of the experiment's arms"],
    ['--out <dir>', 'record directory (default bench/records)'],
    ['--osworld-src <dir>', 'OSWorld checkout (enables seed-guest-server)'],
    JSON_OPT,
  ],
  progress: 'elapsed',
  run: async (o, { progress, args }) => {
    const [experiment] = args as [string];
    const { runExperiment } = await import('./runner.ts');
    return runExperiment({
      experiment,
      quick: !!o.quick,
      trials: o.trials ? Number(o.trials) : undefined,
      arms: o.arms === undefined ? undefined : String(o.arms).split(',').filter(Boolean),
      outDir: o.out === undefined ? undefined : String(o.out),
      armOptions: { osworldSrc: o.osworldSrc === undefined ? undefined : String(o.osworldSrc) },
      command: `bin/drums bench run ${process.argv.slice(process.argv.indexOf(experiment)).join(' ')}`,
      progress,
    });
  },
  report: (record: {
    summary: string;
    verdicts: { pass: boolean | null; barId: string; value: unknown; unit: string; op: string; bar: unknown }[];
    status: string;
    complete: boolean;
  }) =>
    `${record.summary}\n` +
    record.verdicts
      .map((v) => `${v.pass === null ? 'N/A ' : v.pass ? 'PASS' : 'FAIL'}  ${v.barId.padEnd(30)} ${v.value ?? '-'} ${v.unit} (bar ${v.op} ${v.bar})\n`)
      .join('') +
    `status: ${record.status}${record.complete ? '' : ' (incomplete)'}\n`,
  exitCode: (record: { complete: boolean }) => (record.complete ? 0 : 4),
};
