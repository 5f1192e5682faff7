import type { Command } from 'commander';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsClient, Episode, EpisodeStep, EpisodeSummary } from '../../client/client.ts';
import { client, print } from '../util.ts';

/**
 * `episodes ...`: a session's recorded episodes (docs/episodes.md): list, show, score, and export as OSWorld's
 * result layout plus a dataset of steps. Everything goes through the public API (a remote daemon works too).
 */

const line = (e: EpisodeSummary) =>
  `${e.session}  gen ${String(e.generation).padEnd(3)} ${e.closedAt ? (e.closeReason ?? 'closed').padEnd(8) : 'open    '} steps ${String(e.steps).padEnd(5)} frames ${String(e.frames).padEnd(5)} ${(e.bytes / 1024).toFixed(0)} KiB${e.stopped ? `  STOPPED ${e.stopped}` : ''}${e.outcome ? `  reward ${e.outcome.reward ?? '-'} ${e.outcome.outcome ?? ''}` : ''}`;

/** OSWorld's action timestamp: datetime.now().strftime("%Y%m%d@%H%M%S%f"), here in UTC. */
export function osworldTimestamp(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${d.getUTCFullYear()}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}@${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}${p(d.getUTCMilliseconds() * 1000, 6)}`;
}

/** The action as OSWorld's traj.jsonl has it: an OSWorld call's command (or code, script), an API batch's actions. */
function trajAction(s: EpisodeStep): unknown {
  if (s.source === 'api') return s.agentAction;
  const a = s.agentAction as { command?: unknown; code?: unknown; script?: unknown };
  return a.command ?? a.code ?? a.script ?? a;
}

/** Python's str() of a float score, as OSWorld writes result.txt. */
function pyFloat(n: number): string {
  return Number.isInteger(n) ? `${n}.0` : String(n);
}

export interface ExportResult {
  dir: string;
  steps: number;
  frames: number;
  result: number | null;
  end: Episode['end'];
}

/**
 * Writes one episode to `dir`: OSWorld's result layout (traj.jsonl, step_N_TS.<ext> screenshots, initial_state,
 * result.txt when a reward is known), the dataset (steps.jsonl, trees/), and episode.json (the summary and where
 * the event file ends).
 */
export async function exportEpisode(c: DrumsClient, id: string, generation: number, dir: string): Promise<ExportResult> {
  const ep = await c.getEpisode(id, generation, { steps: true, limit: 1 });
  const steps = ep.steps ?? [];
  mkdirSync(dir, { recursive: true });
  const files = new Map<string, Buffer>();
  const fetchFile = async (name: string) => {
    let b = files.get(name);
    if (!b) files.set(name, (b = await c.episodeFile(id, generation, name)));
    return b;
  };
  let frames = 0;
  if (ep.initialFrame) {
    writeFileSync(join(dir, `initial_state.${ep.initialFrame.split('.').pop()}`), await fetchFile(ep.initialFrame));
    frames++;
  }
  const reward = ep.episode.outcome?.reward ?? null;
  const traj: string[] = [];
  const dataset: string[] = [];
  for (const s of steps) {
    const ts = osworldTimestamp(s.at);
    let image: string | null = null;
    if (s.frame) {
      image = `step_${s.step}_${ts}.${s.frame.split('.').pop()}`;
      writeFileSync(join(dir, image), await fetchFile(s.frame));
      frames++;
    }
    let tree: string | null = null;
    if (s.tree) {
      mkdirSync(join(dir, 'trees'), { recursive: true });
      tree = `trees/step_${s.step}.${s.tree.split('.').pop()}`;
      writeFileSync(join(dir, tree), await fetchFile(s.tree));
    }
    const last = s.step === steps.length;
    traj.push(
      JSON.stringify({
        step_num: s.step,
        action_timestamp: ts,
        action: trajAction(s),
        response: null,
        reward: 0,
        done: last && ep.episode.closedAt !== null,
        info: {},
        screenshot_file: image,
      }),
    );
    dataset.push(
      JSON.stringify({
        episode: `${id}/${generation}`,
        session: id,
        generation,
        step: s.step,
        at: s.at,
        source: s.source,
        image,
        action: s.action,
        agent_action: s.agentAction,
        results: s.results,
        tree,
        reward,
        outcome: ep.episode.outcome?.outcome ?? null,
      }),
    );
  }
  writeFileSync(join(dir, 'traj.jsonl'), traj.map((l) => l + '\n').join(''));
  writeFileSync(join(dir, 'steps.jsonl'), dataset.map((l) => l + '\n').join(''));
  if (reward !== null) writeFileSync(join(dir, 'result.txt'), `${pyFloat(reward)}\n`);
  writeFileSync(join(dir, 'episode.json'), JSON.stringify({ episode: ep.episode, end: ep.end }, null, 2) + '\n');
  return { dir, steps: steps.length, frames, result: reward, end: ep.end };
}

export function registerEpisodes(program: Command): void {
  const episodes = program.command('episodes').description("a session's recorded episodes (create it with record; docs/episodes.md)");
  episodes
    .command('ls')
    .argument('<id>', 'session id')
    .option('--json', 'JSON output')
    .action(async (id: string, o: { json?: boolean }) => {
      const list = await client().listEpisodes(id);
      print(!!o.json, list, () => list.map(line).join('\n') || '(no episodes)');
    });
  episodes
    .command('get')
    .argument('<id>', 'session id')
    .argument('<generation>', 'the attempt')
    .option('--steps', 'add the steps')
    .action(async (id: string, g: string, o: { steps?: boolean }) => {
      print(true, await client().getEpisode(id, Number(g), { steps: !!o.steps }), () => '');
    });
  episodes
    .command('outcome')
    .description('attach a reward and/or outcome to an attempt')
    .argument('<id>', 'session id')
    .argument('<generation>', 'the attempt')
    .option('--reward <n>', 'a score, e.g. 1 or 0.5')
    .option('--outcome <word>', 'e.g. success, failure')
    .action(async (id: string, g: string, o: { reward?: string; outcome?: string }) => {
      const s = await client().setEpisodeOutcome(id, Number(g), {
        ...(o.reward !== undefined ? { reward: Number(o.reward) } : {}),
        ...(o.outcome !== undefined ? { outcome: o.outcome } : {}),
      });
      print(false, s, () => line(s));
    });
  episodes
    .command('export')
    .description("write OSWorld's result layout (traj.jsonl, step screenshots, result.txt) and a dataset (steps.jsonl)")
    .argument('<id>', 'session id')
    .requiredOption('--out <dir>', 'output directory (with --generation the episode itself, else one g<N> folder per episode)')
    .option('--generation <n>', 'one attempt (default: every episode of the session)')
    .option('--json', 'JSON output')
    .action(async (id: string, o: { out: string; generation?: string; json?: boolean }) => {
      const c = client();
      const gens = o.generation !== undefined ? [Number(o.generation)] : (await c.listEpisodes(id)).map((e) => e.generation);
      const out: ExportResult[] = [];
      for (const g of gens) out.push(await exportEpisode(c, id, g, o.generation !== undefined ? o.out : join(o.out, `g${g}`)));
      print(!!o.json, out, () =>
        out
          .map(
            (r) =>
              `${r.dir}: ${r.steps} steps, ${r.frames} screenshots${r.result !== null ? `, result ${r.result}` : ''}; events end ${r.end.closed ? 'closed' : 'open'} after ${r.end.lines} lines${r.end.partialBytes ? ` (a cut last line of ${r.end.partialBytes} bytes skipped)` : ''}${r.end.badLines.length ? ` (unreadable lines ${r.end.badLines.join(',')})` : ''}`,
          )
          .join('\n'),
      );
    });
}
