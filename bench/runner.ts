import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Arm } from './arm.ts';
import { getArm } from './arms.ts';
import { judge, loadBars } from './bars.ts';
import { gitState, hostFacts, REPO_ROOT } from './host-facts.ts';
import { recoverHostKnobs, restoreHostKnobs } from './host-knobs.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';
import { RECORD_SCHEMA_VERSION, validateRecord, type ArmRecord, type BenchRecord, type TrialRecord, type Verdict } from './record.ts';
import { FULL, getExperiment, PAGE, QUICK, type Params, type RunOptions } from './experiments.ts';
import { TrialInvalid, createFor, destroyFor, latencyCycles, memoryLadder, type Ctx } from './trial.ts';
import { aggregate } from './aggregate.ts';
import { addSurprises, LIMITATIONS, METHOD, summarize } from './summary.ts';
import { applyProbes, armIsolation } from './isolation.ts';

/** Runs an experiment end to end and writes its record. */
export async function runExperiment(o: RunOptions): Promise<{ record: BenchRecord; file: string }> {
  const exp = getExperiment(o.experiment);
  const armNames = o.arms?.length ? o.arms : exp.arms;
  for (const a of armNames) {
    getArm(a);
    if (!exp.arms.includes(a)) throw new Error(`arm '${a}' is not part of experiment '${exp.name}' (its arms: ${exp.arms.join(', ')})`);
  }
  const bars = loadBars(exp.bars);
  o = { ...o, killAt: o.killAt ?? process.env.DRUMS_BENCH_TEST_KILL_AT };
  const p: Params = { ...(o.quick ? { ...QUICK, ...exp.quick } : { ...FULL, ...exp.full }), ...(o.trials ? { trials: o.trials } : {}), ...o.params };
  const started = new Date().toISOString();
  const g = gitState();
  const progress = o.progress ?? (() => {});
  const recovered = recoverHostKnobs();
  if (recovered) progress(recovered);
  const arms: ArmRecord[] = [];
  const runnable: Arm[] = [];
  for (const name of armNames) {
    const arm = getArm(name);
    const why = arm.unavailable(o.armOptions ?? {});
    const iso = armIsolation(arm, o.outDir);
    arms.push({
      name,
      description: arm.description,
      image: arm.image,
      status: why ? 'skipped' : 'measured',
      ...(why ? { reason: why } : {}),
      ...(arm.unsafe ? { unsafe: arm.unsafe } : {}),
      ...(arm.tradeoff ? { tradeoff: arm.tradeoff } : {}),
      stepNote: arm.stepNote,
      isolation: iso,
    });
    if (!why) runnable.push(arm);
    else progress(`skip arm ${name}: ${why}`);
  }
  const trials: TrialRecord[] = [];
  const failures: string[] = [];
  const incompleteReasons: string[] = [];
  let interrupted = false;
  const onSig = () => {
    interrupted = true;
    progress('interrupted: finishing the current step, then writing a partial record');
  };
  process.once('SIGINT', onSig);
  const daemonEnv = Object.assign({}, ...runnable.map((a) => a.hooks?.daemonEnv ?? {})) as Record<string, string>;
  const d = runnable.length ? await startPrivateDaemon(daemonEnv) : undefined;
  try {
    const total = p.warmups + p.trials;
    for (let t = 0; t < total && !interrupted; t++) {
      const warmup = t < p.warmups;
      // Interleave: every trial runs every arm, in an order rotated per trial.
      const order = runnable.map((_, i) => runnable[(i + t) % runnable.length]!);
      for (const arm of order) {
        if (interrupted) break;
        const trialNo = t - p.warmups + 1;
        const label = warmup ? `warm-up ${t + 1}/${p.warmups}` : `trial ${trialNo}/${p.trials}`;
        const data: Record<string, unknown> = {};
        const status = (s: string) => progress(`[${label} · ${arm.name}] ${s}`);
        const ctx: Ctx = { d: d!, c: d!.client, p, o, exp, status, armCtx: { c: d!.client, instance: d!.instance, quick: o.quick, status, data } };
        const t0 = performance.now();
        const at = new Date().toISOString();
        let entered = false;
        try {
          entered = true;
          await arm.hooks?.enter?.(ctx.armCtx);
          if (warmup) {
            ctx.status('warm-up create/destroy (discarded)');
            const s = await createFor(ctx, arm, PAGE);
            await destroyFor(ctx, arm, s);
          } else {
            await latencyCycles(ctx, arm, data);
            const cap = !o.quick && exp.capacity && arm.name === 'baseline' && trialNo === p.trials ? exp.capacity : undefined;
            await memoryLadder(ctx, arm, data, cap);
          }
          if (entered) {
            entered = false;
            await arm.hooks?.exit?.(ctx.armCtx);
          }
          trials.push({ arm: arm.name, trial: trialNo, warmup, valid: true, startedAt: at, durationMs: performance.now() - t0, data });
        } catch (e) {
          if (entered)
            await arm.hooks?.exit?.(ctx.armCtx).catch((x) => {
              failures.push(`${arm.name} ${label}: exit hook: ${(x as Error).message}`);
            });
          const reason = e instanceof TrialInvalid ? e.message : `error: ${(e as Error).message}`;
          failures.push(`${arm.name} ${label}: ${reason}`);
          trials.push({ arm: arm.name, trial: trialNo, warmup, valid: false, reason, startedAt: at, durationMs: performance.now() - t0, data });
          progress(`[${label} · ${arm.name}] INVALID: ${reason}`);
        }
      }
    }
  } finally {
    process.removeListener('SIGINT', onSig);
    await d?.stop();
    const left = restoreHostKnobs();
    if (left.length) failures.push(`host knobs not restored: ${left.join('; ')}`);
  }
  if (interrupted) incompleteReasons.push('interrupted (SIGINT) before all trials ran');

  // Arm status from its trials.
  for (const a of arms) {
    if (a.status === 'skipped') {
      incompleteReasons.push(`arm ${a.name} skipped: ${a.reason}`);
      continue;
    }
    const ts = trials.filter((t) => t.arm === a.name && !t.warmup);
    const ok = ts.filter((t) => t.valid).length;
    if (ok === 0) {
      a.status = 'invalid';
      a.reason =
        ts
          .map((t) => t.reason)
          .filter(Boolean)
          .join('; ') || 'no trial ran';
      incompleteReasons.push(`arm ${a.name} has no valid trial`);
    } else if (ok < p.trials) {
      a.status = 'partial';
      a.reason = `${ok}/${p.trials} valid trials: ${ts
        .filter((t) => !t.valid)
        .map((t) => t.reason)
        .join('; ')}`;
      incompleteReasons.push(`arm ${a.name}: ${a.reason}`);
    }
  }
  applyProbes(arms, trials);
  const { results, plots } = aggregate(arms, trials, p);
  const verdicts = bars.bars.bars
    .filter((b) => !b.measuredBy)
    .map((b): Verdict => {
      const row = results.find((r) => r.arm === b.arm && r.metric === b.metric);
      let v = row?.value ?? null;
      let implausible: string | undefined;
      if (v !== null && b.unit === 'MiB' && v <= 0) {
        implausible = `implausible value ${v} MiB (host noise swamped the slope); no verdict`;
        v = null;
      }
      return {
        barId: b.id,
        arm: b.arm,
        metric: b.metric,
        op: b.op,
        bar: b.value,
        unit: b.unit,
        value: v,
        ci: row?.ci ?? null,
        pass: judge(b, v),
        ...(implausible
          ? { note: implausible }
          : row
            ? {}
            : { note: o.quick && b.metric === 'concurrent_sessions_ok' ? 'not measured in quick mode (needs the full run)' : 'not measured in this run' }),
      };
    });
  const complete = incompleteReasons.length === 0;
  const status: BenchRecord['status'] = verdicts.some((v) => v.pass === false)
    ? 'failed'
    : !complete || verdicts.some((v) => v.pass === null)
      ? 'inconclusive'
      : 'passed';
  const record: BenchRecord = {
    schemaVersion: RECORD_SCHEMA_VERSION,
    kind: 'drums-bench-record',
    experiment: exp.name,
    description: exp.description,
    mode: o.quick ? 'quick' : 'full',
    status,
    complete,
    incompleteReasons,
    command:
      o.command ??
      `bin/drums bench run ${exp.name}${o.quick ? ' --quick' : ''}${o.trials ? ` --trials ${o.trials}` : ''}${o.arms?.length ? ` --arms ${o.arms.join(',')}` : ''}`,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    bars: { file: `bench/bars/${exp.bars}.json`, sha256: bars.sha256, fixedAt: bars.bars.fixedAt, fixedCommit: bars.bars.fixedCommit },
    host: hostFacts(),
    method: METHOD,
    config: { params: p, page: PAGE, arms: armNames, capacity: o.quick ? null : (exp.capacity ?? null) },
    arms,
    trials,
    results,
    verdicts,
    summary: '',
    surprises: [],
    limitations: LIMITATIONS(o.quick),
    failures,
    plots,
  };
  record.summary = summarize(record);
  addSurprises(record);
  const errs = validateRecord(record);
  if (errs.length) throw new Error(`internal: the record does not validate: ${errs.join('; ')}`);
  const outDir = o.outDir ?? join(REPO_ROOT, 'bench', 'records');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `${exp.name}-${o.quick ? 'quick-' : ''}${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
