/** The record a bench run writes (bench/records/*.json) and its validator. */
export const RECORD_SCHEMA_VERSION = 1;

export interface ResultRow {
  arm: string;
  metric: string;
  value: number | null;
  ci: [number, number] | null;
  unit: string;
  n: number;
  note?: string;
}

export interface Verdict {
  barId: string;
  arm: string;
  metric: string;
  op: '<=' | '>=';
  bar: number;
  unit: string;
  value: number | null;
  ci: [number, number] | null;
  pass: boolean | null;
  note?: string;
}

export interface TrialRecord {
  arm: string;
  trial: number;
  warmup: boolean;
  valid: boolean;
  reason?: string;
  startedAt: string;
  durationMs: number;
  data: Record<string, unknown>;
}

export interface ArmRecord {
  name: string;
  description: string;
  image: string;
  status: 'measured' | 'skipped' | 'invalid' | 'partial';
  reason?: string;
  unsafe?: string;
  /** A saving bought with isolation: what the arm's sessions give up. */
  tradeoff?: string;
  stepNote?: string;
  isolation: { verdict: 'pass' | 'fail' | 'not-audited'; failedProbes: string[]; source?: string };
}

export interface BenchRecord {
  schemaVersion: number;
  kind: 'drums-bench-record';
  experiment: string;
  description: string;
  mode: 'quick' | 'full';
  status: 'passed' | 'failed' | 'inconclusive';
  complete: boolean;
  incompleteReasons: string[];
  command: string;
  commit: string;
  dirty: boolean;
  started: string;
  finished: string;
  bars: { file: string; sha256: string; fixedAt: string; fixedCommit: string } | null;
  host: Record<string, unknown>;
  method: Record<string, string>;
  config: Record<string, unknown>;
  arms: ArmRecord[];
  trials: TrialRecord[];
  results: ResultRow[];
  verdicts: Verdict[];
  summary: string;
  surprises: string[];
  limitations: string[];
  failures: string[];
  plots: {
    memory?: { arm: string; trial: number; points: { n: number; usedMiB: number }[]; slope: number; intercept: number }[];
    latency?: { arm: string; metric: string; samples: number[] }[];
    /** Steps/s against N, per arm and trial. */
    throughput?: { arm: string; trial: number; points: { n: number; stepsPerSec: number }[] }[];
  };
  audit?: unknown;
}

/** Returns the problems with a parsed record (empty = valid). */
export function validateRecord(r: unknown): string[] {
  const errs: string[] = [];
  if (!r || typeof r !== 'object') return ['record is not an object'];
  const o = r as Record<string, unknown>;
  const need = (k: string, t: string) => {
    const v = o[k];
    const actual = Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v;
    if (!t.split('|').includes(actual)) errs.push(`${k}: expected ${t}, got ${actual}`);
  };
  if (o.schemaVersion !== RECORD_SCHEMA_VERSION) errs.push(`schemaVersion: expected ${RECORD_SCHEMA_VERSION}, got ${JSON.stringify(o.schemaVersion)}`);
  if (o.kind !== 'drums-bench-record') errs.push('kind: expected drums-bench-record');
  for (const [k, t] of Object.entries({
    experiment: 'string',
    description: 'string',
    mode: 'string',
    status: 'string',
    complete: 'boolean',
    incompleteReasons: 'array',
    command: 'string',
    commit: 'string',
    dirty: 'boolean',
    started: 'string',
    finished: 'string',
    bars: 'object|null',
    host: 'object',
    method: 'object',
    config: 'object',
    arms: 'array',
    trials: 'array',
    results: 'array',
    verdicts: 'array',
    summary: 'string',
    surprises: 'array',
    limitations: 'array',
    failures: 'array',
    plots: 'object',
  }))
    need(k, t);
  if (!['quick', 'full'].includes(o.mode as string)) errs.push(`mode: ${String(o.mode)}`);
  if (!['passed', 'failed', 'inconclusive'].includes(o.status as string)) errs.push(`status: ${String(o.status)}`);
  if (o.status === 'passed' && o.complete !== true) errs.push('status passed but record incomplete');
  for (const [i, a] of (Array.isArray(o.arms) ? (o.arms as ArmRecord[]) : []).entries()) {
    if (typeof a.name !== 'string' || !['measured', 'skipped', 'invalid', 'partial'].includes(a.status)) errs.push(`arms[${i}]: bad name/status`);
    if ((a.status === 'skipped' || a.status === 'invalid') && !a.reason) errs.push(`arms[${i}]: ${a.status} without a reason`);
    if (!a.isolation || !['pass', 'fail', 'not-audited'].includes(a.isolation.verdict)) errs.push(`arms[${i}].isolation: bad verdict`);
  }
  for (const [i, t] of (Array.isArray(o.trials) ? (o.trials as TrialRecord[]) : []).entries()) {
    if (typeof t.valid !== 'boolean' || typeof t.warmup !== 'boolean') errs.push(`trials[${i}]: valid/warmup must be booleans`);
    if (!t.valid && !t.reason) errs.push(`trials[${i}]: invalid without a reason`);
  }
  for (const [i, x] of (Array.isArray(o.results) ? (o.results as ResultRow[]) : []).entries()) {
    if (typeof x.metric !== 'string' || typeof x.unit !== 'string' || typeof x.n !== 'number') errs.push(`results[${i}]: metric/unit/n`);
    if (x.value !== null && typeof x.value !== 'number') errs.push(`results[${i}]: value`);
    if (x.ci !== null && !(Array.isArray(x.ci) && x.ci.length === 2)) errs.push(`results[${i}]: ci`);
  }
  for (const [i, v] of (Array.isArray(o.verdicts) ? (o.verdicts as Verdict[]) : []).entries()) {
    if (typeof v.barId !== 'string' || ![true, false, null].includes(v.pass)) errs.push(`verdicts[${i}]: barId/pass`);
  }
  return errs;
}
