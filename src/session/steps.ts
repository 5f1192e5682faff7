/**
 * Running a session operation as named steps: create and reset (fork's copies are creates).
 * Each step is checked against the caller's signal before it starts, timed into the session's
 * timings and logged in the step record that errors carry. On a failure the result offers
 * `undo`: every completed step's undo, in reverse. Create calls it (outside its start slot);
 * reset does not (a failed reset leaves the session broken, and destroy cleans up).
 */
import { CancelledError, StepError, type StepRecord, errorMessage } from '../common/errors.ts';

export interface Step {
  name: string;
  do: () => Promise<void>;
  undo?: () => Promise<void>;
  /** Runs even when the signal is already aborted (reset's `stop`: the old generation always ends). */
  notCancellable?: boolean;
}

/** A stage is one step, or independent chains of steps that run concurrently. */
export type Stage = Step | Step[][];

export interface RunStepsOptions {
  /** 'create' or 'reset': names the operation in cancellation messages. */
  op: string;
  signal?: AbortSignal;
  /** Where each step's duration goes, as `<timingPrefix><name>Ms`. */
  timings: Record<string, number>;
  timingPrefix: string;
  /** Test hooks: fail instead of running this step; kill the daemon (SIGKILL) right after this one. */
  failAt?: string;
  killAt?: string;
}

export type RunStepsResult =
  | { ok: true; steps: StepRecord[] }
  /** `undo` runs the completed steps' undos in reverse and returns the errors of those that failed. */
  | { ok: false; error: StepError; steps: StepRecord[]; undo: () => Promise<string[]> };

/** The error of an operation cancelled through its signal (the reason names why). */
export function cancelled(signal: AbortSignal, op: string): CancelledError {
  const why = signal.reason instanceof Error && signal.reason.name === 'TimeoutError' ? 'its deadline passed' : 'the caller went away';
  return new CancelledError(`${op} cancelled: ${why}`);
}

/**
 * Runs the stages in order; a concurrent stage waits for every chain to settle, so the done list
 * holds every completed step before any undo. Never throws: the result says how it ended, with
 * the failed step's StepError (carrying the step log up to it).
 */
export async function runSteps(stages: readonly Stage[], o: RunStepsOptions): Promise<RunStepsResult> {
  const { signal } = o;
  const done: Step[] = [];
  const steps: StepRecord[] = [];
  const runStep = async (step: Step) => {
    if (signal?.aborted && !step.notCancellable) throw new StepError(step.name, cancelled(signal, o.op), steps);
    if (o.failAt === step.name) throw new StepError(step.name, new Error(`injected failure at '${step.name}'`), steps);
    const ts = performance.now();
    try {
      await step.do();
    } catch (e) {
      throw new StepError(step.name, signal?.aborted ? cancelled(signal, o.op) : e, steps);
    }
    const ms = performance.now() - ts;
    o.timings[`${o.timingPrefix}${step.name}Ms`] = ms;
    steps.push({ step: step.name, ms });
    done.push(step);
    if (o.killAt === step.name) process.kill(process.pid, 'SIGKILL');
  };
  try {
    for (const stage of stages) {
      if (!Array.isArray(stage)) {
        await runStep(stage);
        continue;
      }
      const results = await Promise.allSettled(
        stage.map(async (chain) => {
          for (const step of chain) await runStep(step);
        }),
      );
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
  } catch (e) {
    const error = e instanceof StepError ? e : new StepError('unknown', e, steps);
    const undo = async () => {
      const cleanupErrors: string[] = [];
      for (const step of [...done].reverse()) {
        try {
          await step.undo?.();
        } catch (ue) {
          cleanupErrors.push(`${step.name}: ${errorMessage(ue)}`);
        }
      }
      return cleanupErrors;
    };
    return { ok: false, error, steps, undo };
  }
  return { ok: true, steps };
}
