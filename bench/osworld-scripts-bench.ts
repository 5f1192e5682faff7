import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { badObservation } from '../src/common/osworld-observation.ts';
import { gitState, hostFacts } from './host-facts.ts';
import { runPythonDriver } from './python-driver.ts';

/**
 * `drums bench osworld-scripts`: OSWorld's own scripts, unchanged, as its users run them against Drums: the
 * checkout's `run.py` and `scripts/python/run_multienv.py --num_envs 4`, each over the same few `os` tasks (default
 * three) under each observation type, `atOnce` runs at a time (default 2: an observation type's two scripts) on one private daemon, with PromptAgent talking to the model
 * double of sdk/python/bench/osworld_script_runs.py (the only double). The record says, per run, what it left in
 * OSWorld's results directory (traj.jsonl, the step screenshots, result.txt, recording.mp4) and its wall time.
 * lib_run_single sleeps ~80 s per task whatever the provider, which is why this is a bench and the suite
 * (sdk/python/tests/test_osworld_scripts.py) runs one task per run.
 */
export interface OsworldScriptsBenchOptions {
  checkout: string;
  observations: string[];
  /** run (run.py), multienv (run_multienv.py --num_envs 4). */
  scripts: string[];
  /** os task ids the model double has a script for (default: its three that score 1.0 when done). */
  tasks?: string[];
  screen: string;
  timeoutMinutes: number;
  /** Runs at a time. */
  atOnce: number;
  outDir: string;
  progress?: (msg: string) => void;
}

export async function runOsworldScriptsBench(o: OsworldScriptsBenchOptions) {
  const started = new Date().toISOString();
  const progress = o.progress ?? (() => {});
  for (const x of o.observations) {
    const bad = badObservation(x);
    if (bad) throw new Error(bad);
  }
  const checkout = resolve(o.checkout);
  if (!existsSync(join(checkout, 'run.py'))) throw new Error(`--checkout ${checkout} is not an OSWorld checkout: it has no run.py`);
  const t0 = performance.now();
  const args = ['--checkout', checkout, '--observations', o.observations.join(','), '--scripts', o.scripts.join(',')];
  args.push(
    '--screen',
    o.screen,
    '--timeout',
    String(o.timeoutMinutes * 60),
    '--at-once',
    String(o.atOnce),
    ...(o.tasks?.length ? ['--tasks', o.tasks.join(',')] : []),
  );
  const { result: driver, failure } = await runPythonDriver('osworld_script_runs', args, { progress });
  const g = gitState();
  const record = {
    schemaVersion: 1,
    kind: 'osworld-scripts',
    description:
      "OSWorld's run.py and scripts/python/run_multienv.py --num_envs 4, unchanged from the checkout, each over the same os tasks under each observation type, a few runs at a time on one private daemon, PromptAgent talking to a loopback model double: what each run left in OSWorld's results directory and its wall time.",
    command: `bin/drums bench osworld-scripts --checkout ${o.checkout} --observations ${o.observations.join(',')} --scripts ${o.scripts.join(',')} --screen ${o.screen} --at-once ${o.atOnce}${o.tasks?.length ? ` --tasks ${o.tasks.join(',')}` : ''}`,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    wallSeconds: Math.round((performance.now() - t0) / 100) / 10,
    complete: failure === null && driver?.complete === true,
    ...(failure ? { reason: failure } : {}),
    host: hostFacts(),
    config: {
      checkout,
      observations: o.observations,
      scripts: o.scripts,
      tasks: o.tasks ?? null,
      screen: o.screen,
      timeoutMinutes: o.timeoutMinutes,
      atOnce: o.atOnce,
    },
    results: driver,
    notes: [
      'finished = the script exited 0 and every task left a results directory with traj.jsonl (no step Error), a screenshot per step at the screen size, result.txt and a finished recording.mp4 (ftyp ... moov)',
      "wall_seconds per run: from the script's start to its exit; --at-once runs share the host at a time",
      'lib_run_single sleeps 60 s before and 20 s after each task: a 3-task run.py takes at least 4 minutes whatever the provider',
    ],
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `osworld-scripts-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(record, null, 2)}\n`);
  return { record, file };
}
