import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { gitState, hostFacts } from './host-facts.ts';
import { runPythonDriver } from './python-driver.ts';

/**
 * `drums bench a11y-osworld`: the observation measures of issue 28, per OSWorld app, through an OSWorld checkout's
 * own desktop_env (the driver: sdk/python/bench/osworld_observe.py). Beside `drums bench a11y` (bench/a11y-bench.ts,
 * issue 30's reference walk vs fast read through the HTTP API on its 7-app desktop), this one reads as OSWorld's
 * agents do (the guest contract's /accessibility, through desktop_env's controller) with each app opened by a real
 * task's setup on stand-in files, at OSWorld's 1920x1080:
 * - the first observation after reset (the screenshot and the tree that `reset()` ends with), p50/p99 per app over
 *   `rounds` resets, with the time until the app's window is up and until it is in the tree;
 * - the tree's size and read time with the app's file open, alone (`reads` in a row) and in `sessions` sessions of
 *   that app read at once.
 */
export interface A11yOsworldBenchOptions {
  checkout: string;
  apps: string[];
  rounds: number;
  reads: number;
  sessions: number;
  screen: string;
  outDir: string;
  progress: (msg: string) => void;
}

export async function runA11yOsworldBench(o: A11yOsworldBenchOptions) {
  const started = new Date().toISOString();
  const checkout = resolve(o.checkout);
  if (!existsSync(join(checkout, 'desktop_env', 'desktop_env.py')))
    throw new Error(`--checkout ${checkout} is not an OSWorld checkout: it has no desktop_env/desktop_env.py`);
  const t0 = performance.now();
  const args = ['--checkout', checkout, '--apps', o.apps.join(','), '--rounds', String(o.rounds), '--reads', String(o.reads)];
  args.push('--sessions', String(o.sessions), '--screen', o.screen);
  const { result, failure } = await runPythonDriver('osworld_observe', args, { checkout, progress: o.progress });
  const g = gitState();
  const record = {
    schemaVersion: 1,
    kind: 'a11y-osworld',
    description:
      "OSWorld's observations per app through a checkout's own desktop_env on Drums (provider drums, require_a11y_tree, each app opened by a task's real setup on stand-in files): the first observation after reset (screenshot + tree) p50/p99, and the tree's size and read time with the file open, alone and with N sessions of the app read at once.",
    command: `bin/drums bench a11y-osworld --checkout ${o.checkout} --apps ${o.apps.join(',')} --rounds ${o.rounds} --reads ${o.reads} --sessions ${o.sessions} --screen ${o.screen}`,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    wallSeconds: Math.round((performance.now() - t0) / 100) / 10,
    complete: failure === null && result?.complete === true,
    ...(failure ? { reason: failure } : {}),
    host: hostFacts(),
    config: { checkout, apps: o.apps, rounds: o.rounds, reads: o.reads, sessions: o.sessions, screen: o.screen },
    results: result,
    notes: [
      "first_observation: the observation DesktopEnv.reset() ends with (controller.get_screenshot, then get_accessibility_tree), timed call by call; it is taken as soon as the task's setup returns, so the app may not be in it yet (app_in_first_tree counts the resets where it was). lib_run_single sleeps 60 s before the agent's first step; window_s = from reset()'s return until the app's window is up; in_tree_s = from then until a tree read that holds the app's application returns (so it includes that read)",
      'alone / concurrent: reads of /accessibility (the guest contract, as desktop_env reads it) once the app is in the tree; concurrent = that many sessions of the app, each read at the same moment, per round',
      'os has no task that starts an app: its task gets a step that launches gnome-terminal (added_terminal); VS Code is not in the image',
      'seconds throughout; chars = the XML tree desktop_env returns',
    ],
  };
  mkdirSync(o.outDir, { recursive: true });
  const file = join(o.outDir, `a11y-osworld-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(record, null, 2)}\n`);
  return { record, file };
}
