import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Arm } from './arm.ts';
import { REPO_ROOT } from './host-facts.ts';
import type { ArmRecord, BenchRecord, TrialRecord } from './record.ts';

/** Each arm's isolation verdict: from audit records on disk, or from the arm's in-run probe. */
/** An arm's isolation verdict: its own audit record, or what the arm declares (fail by design; the baseline's verdict). */
export function armIsolation(arm: Arm, dir?: string): ArmRecord['isolation'] {
  const decl = arm.isolation;
  if (!decl) return isolationOf(arm.name, dir);
  if (decl.kind === 'fail-by-design') return { verdict: 'fail', failedProbes: [`${decl.probe} (by design)`], source: decl.why };
  const b = isolationOf('baseline', dir);
  return {
    verdict: b.verdict,
    failedProbes: b.failedProbes,
    source: `${b.verdict === 'not-audited' ? '' : `the baseline's audit (${b.source}); `}${decl.why}`,
  };
}

/** Puts the result of an arm's in-run isolation probe (ksmProbe, or a generic isolationProbe) into its verdict: observed = the named probe failed. */
export function applyProbes(arms: ArmRecord[], trials: TrialRecord[]): void {
  for (const a of arms) {
    const generic = trials
      .filter((t) => t.arm === a.name && !t.warmup)
      .map((t) => t.data.isolationProbe as { id: string; observed: boolean; detail: string } | undefined)
      .filter((x) => x);
    if (generic.length) {
      const hit = generic.find((x) => x!.observed);
      a.isolation = hit
        ? {
            verdict: 'fail',
            failedProbes: [hit.id],
            source: `in-run probe (${generic.filter((x) => x!.observed).length} of ${generic.length} trials observed it): ${hit.detail}. ${a.isolation.source ?? ''}`,
          }
        : {
            ...a.isolation,
            verdict: 'fail',
            source: `in-run probe ${generic[0]!.id} did not observe the path (${generic[0]!.detail}); FAIL by design regardless: ${a.isolation.source ?? ''}`,
          };
      continue;
    }
    const probes = trials
      .filter((t) => t.arm === a.name && !t.warmup)
      .map(
        (t) =>
          t.data.ksmProbe as
            | {
                crossSessionMerge?: boolean;
                cowTimingVisible?: boolean;
                guess?: { mergedPages?: number; medianWriteNs?: number };
                control?: { mergedPages?: number; medianWriteNs?: number };
                pages?: number;
              }
            | undefined,
      )
      .filter((x) => x);
    if (!probes.length) continue;
    const hit = probes.find((x) => x!.crossSessionMerge);
    if (hit) {
      const ids = ['ksm.cross-session-merge', ...(hit.cowTimingVisible ? ['ksm.cow-write-timing'] : [])];
      a.isolation = {
        verdict: 'fail',
        failedProbes: ids,
        source: `in-run probe: session A's guess of session B's pages merged ${hit.guess?.mergedPages}/${hit.pages} (control ${hit.control?.mergedPages}/${hit.pages}); a one-byte write took ${hit.guess?.medianWriteNs} ns median on the guessed pages vs ${hit.control?.medianWriteNs} ns on the control (copy-on-write of merged pages): A learns which contents B holds. ${a.isolation.source ?? ''}`,
      };
    } else {
      a.isolation = {
        ...a.isolation,
        verdict: 'fail',
        source: `in-run probe did not observe a cross-session merge in time (${JSON.stringify(probes[0]).slice(0, 300)}); FAIL by design regardless: ${a.isolation.source ?? ''}`,
      };
    }
  }
}

/** The isolation verdict of an arm from the newest audit record that covers it. */
export function isolationOf(arm: string, dir?: string): ArmRecord['isolation'] {
  const dirs = [...new Set([dir, join(REPO_ROOT, 'bench', 'records')].filter((x): x is string => !!x))];
  let best: { at: string; iso: ArmRecord['isolation'] } | undefined;
  for (const d of dirs) {
    if (!existsSync(d)) continue;
    for (const f of readdirSync(d).filter((x) => x.startsWith('audit-') && x.endsWith('.json'))) {
      try {
        const rec = JSON.parse(readFileSync(join(d, f), 'utf8')) as BenchRecord;
        const a = rec.arms.find((x) => x.name === arm && x.status !== 'skipped');
        if (a && a.isolation.verdict !== 'not-audited' && (!best || rec.started > best.at))
          best = { at: rec.started, iso: { ...a.isolation, source: join(d, f).replace(REPO_ROOT + '/', '') } };
      } catch {
        /* not a record */
      }
    }
  }
  return best?.iso ?? { verdict: 'not-audited', failedProbes: [], source: 'no audit record for this arm; run drums audit --arms ' + arm };
}
