// OSWorld run.py's `--observation_type` choices and its default, for `drums osworld run
// --observation` (src/osworld/run.ts) and `drums bench osworld-run --observations`
// (bench/osworld-run-bench.ts). sdk/python/drums/osworld.py holds the same list (OBSERVATIONS).
export const OBSERVATIONS = ['screenshot', 'a11y_tree', 'screenshot_a11y_tree', 'som'] as const;
export type Observation = (typeof OBSERVATIONS)[number];
export const DEFAULT_OBSERVATION: Observation = 'a11y_tree';

/** Why `x` is not an observation type (null when it is one), saying what to use. */
export function badObservation(x: string): string | null {
  return (OBSERVATIONS as readonly string[]).includes(x)
    ? null
    : `observation type ${JSON.stringify(x)} is not one of ${OBSERVATIONS.join(', ')} (OSWorld run.py's --observation_type; default ${DEFAULT_OBSERVATION})`;
}
