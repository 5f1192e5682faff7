import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gitState, REPO_ROOT } from './host-facts.ts';

/**
 * Pre-registered bars. A bar is fixed in bench/bars/<experiment>.json by
 * `drums bench preregister` (with the commit and time) BEFORE measuring; a
 * record names the bars file's sha256, so a later edit of the bars is
 * detectable (the site flags it).
 */
export interface Bar {
  id: string;
  /** Metric name as it appears in a record's results. */
  metric: string;
  /** Arm the bar applies to. */
  arm: string;
  op: '<=' | '>=';
  value: number;
  unit: string;
  source: string;
  /** Where the number comes from when another bench measures it (ops/api/osworld records). */
  measuredBy?: string;
}

export interface BarsFile {
  schemaVersion: 1;
  experiment: string;
  fixedAt: string;
  fixedCommit: string;
  fixedDirty: boolean;
  bars: Bar[];
}

const SESSION_CORE: Bar[] = [
  { id: 'desktop-ready-p50', metric: 'create_desktop_ready_ms.p50', arm: 'baseline', op: '<=', value: 300, unit: 'ms', source: 'issue: session core' },
  { id: 'browser-ready-p50', metric: 'create_browser_ready_ms.p50', arm: 'baseline', op: '<=', value: 1000, unit: 'ms', source: 'issue: session core' },
  { id: 'reset-p50', metric: 'reset_ms.p50', arm: 'baseline', op: '<=', value: 500, unit: 'ms', source: 'issue: session core' },
  { id: 'mem-per-session-chromium', metric: 'mem_per_session_mib', arm: 'baseline', op: '<=', value: 130, unit: 'MiB', source: 'issue: session core' },
  {
    id: 'concurrent-chromium-sessions',
    metric: 'concurrent_sessions_ok',
    arm: 'baseline',
    op: '>=',
    value: 50,
    unit: 'sessions',
    source: 'issue: session core',
  },
];

const OBSERVE_ACT: Bar[] = [
  ['screenshot-png-p50', 'screenshot_png_ms.p50', 15],
  ['screenshot-jpeg-q80-p50', 'screenshot_jpeg_q80_ms.p50', 12],
  ['screenshot-raw-p50', 'screenshot_raw_ms.p50', 3],
  ['click-p50', 'click_ms.p50', 2],
  ['action-screenshot-p50', 'action_screenshot_ms.p50', 20],
  ['type-100-chars-p50', 'type_100_chars_ms.p50', 30],
  ['a11y-tree-p50', 'a11y_tree_ms.p50', 250],
  ['exec-true-p50', 'exec_true_ms.p50', 50],
].map(([id, metric, value]) => ({
  id: id as string,
  metric: metric as string,
  arm: 'baseline',
  op: '<=' as const,
  value: value as number,
  unit: 'ms',
  source: 'issue: observe/act',
  measuredBy: 'ops-bench',
}));

const API: Bar[] = [
  { id: 'api-overhead-p50', metric: 'api_overhead_ms.p50', arm: 'baseline', op: '<=', value: 1, unit: 'ms', source: 'issue: API', measuredBy: 'api-bench' },
];
const OSWORLD: Bar[] = [
  {
    id: 'osworld-reset-p50',
    metric: 'osworld_reset_ms.p50',
    arm: 'baseline',
    op: '<=',
    value: 1000,
    unit: 'ms',
    source: 'issue: OSWorld',
    measuredBy: 'osworld',
  },
];

const AUDIT: Bar[] = [
  { id: 'audit-probes', metric: 'audit_probes_run', arm: 'baseline', op: '>=', value: 40, unit: 'probes', source: 'issue 6: isolation audit' },
  {
    id: 'audit-failures',
    metric: 'audit_probes_failed',
    arm: 'baseline',
    op: '<=',
    value: 0,
    unit: 'probes',
    source: 'issue 6: isolation audit (any observation or influence path = FAIL)',
  },
];

const STEPS: Bar[] = [
  {
    id: 'steps-per-sec-n100',
    metric: 'steps_per_sec.N100',
    arm: 'frames',
    op: '>=',
    value: 150,
    unit: 'steps/s',
    source: 'issue 13: 100 Chromium sessions, 8 closed-loop clients, click + PNG 1280x800',
  },
  {
    id: 'step-p99-at-50-offered',
    metric: 'open_loop_step_ms.p99@50',
    arm: 'frames',
    op: '<=',
    value: 100,
    unit: 'ms',
    source: 'issue 13: step p99 at 50 steps/s offered',
  },
  {
    id: 'daemon-cpu-per-png-step',
    metric: 'daemon_cpu_ms_per_step.png',
    arm: 'frames',
    op: '<=',
    value: 5,
    unit: 'ms',
    source: 'issue 13: daemon CPU per step, PNG',
  },
];

/** The bars each experiment is judged against (the code's proposal; the frozen file is what counts). */
export const PROPOSED_BARS: Record<string, Bar[]> = {
  baseline: SESSION_CORE,
  density: SESSION_CORE,
  'observe-act': OBSERVE_ACT,
  api: API,
  osworld: OSWORLD,
  audit: AUDIT,
  steps: STEPS,
};

export const BARS_DIR = join(REPO_ROOT, 'bench', 'bars');
export const barsPath = (experiment: string, dir = BARS_DIR) => join(dir, `${experiment}.json`);

export function sha256(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

/** Freezes the bars of one experiment. Refuses to overwrite an existing file unless forced. */
export function preregister(experiment: string, opts: { force?: boolean; dir?: string } = {}): { file: string; bars: BarsFile; sha256: string } {
  const bars = PROPOSED_BARS[experiment];
  if (!bars) throw new Error(`unknown experiment '${experiment}'; experiments with bars: ${Object.keys(PROPOSED_BARS).join(', ')}`);
  const file = barsPath(experiment, opts.dir);
  if (existsSync(file) && !opts.force) {
    throw new Error(
      `bars for '${experiment}' are already fixed in ${file} (${loadBars(experiment, opts.dir).bars.fixedAt}); pre-registered bars are not changed silently — pass --force to re-register, and records measured against the old file will be flagged`,
    );
  }
  const g = gitState();
  const content: BarsFile = { schemaVersion: 1, experiment, fixedAt: new Date().toISOString(), fixedCommit: g.commit, fixedDirty: g.dirty, bars };
  mkdirSync(opts.dir ?? BARS_DIR, { recursive: true });
  const text = JSON.stringify(content, null, 2) + '\n';
  writeFileSync(file, text);
  return { file, bars: content, sha256: sha256(text) };
}

export function loadBars(experiment: string, dir = BARS_DIR): { file: string; bars: BarsFile; sha256: string } {
  const file = barsPath(experiment, dir);
  if (!existsSync(file)) throw new Error(`no pre-registered bars for '${experiment}' (${file}); run 'drums bench preregister ${experiment}' before measuring`);
  const text = readFileSync(file, 'utf8');
  const bars = JSON.parse(text) as BarsFile;
  if (bars.schemaVersion !== 1 || !Array.isArray(bars.bars)) throw new Error(`${file} is not a bars file (schemaVersion 1)`);
  return { file, bars, sha256: sha256(text) };
}

export function judge(bar: Bar, value: number | null | undefined): boolean | null {
  if (value === null || value === undefined || !Number.isFinite(value)) return null;
  return bar.op === '<=' ? value <= bar.value : value >= bar.value;
}
