import type { Command } from 'commander';
import { join } from 'node:path';
import type { EpisodeSummary } from '../../client/client.ts';
import { endLine, type ExportResult, exportEpisode } from '../../client/episode-export.ts';
import { client, print } from '../util.ts';

/**
 * `episodes ...`: a session's recorded episodes (docs/episodes.md): list, show, score, and export as OSWorld's
 * result layout plus a dataset of steps. Everything goes through the public API (a remote daemon works too).
 */

const line = (e: EpisodeSummary) =>
  `${e.session}  gen ${String(e.generation).padEnd(3)} ${e.closedAt ? (e.closeReason ?? 'closed').padEnd(8) : 'open    '} steps ${String(e.steps).padEnd(5)} frames ${String(e.frames).padEnd(5)} ${(e.bytes / 1024).toFixed(0)} KiB${e.stopped ? `  STOPPED ${e.stopped}` : ''}${e.outcome ? `  reward ${e.outcome.reward ?? '-'} ${e.outcome.outcome ?? ''}` : ''}`;

export function registerEpisodes(program: Command): void {
  const episodes = program.command('episodes').description("a session's recorded episodes (create it with record; docs/episodes.md)");
  episodes
    .command('ls')
    .description("a session's episodes (oldest first), or with no id every episode of the daemon (newest first)")
    .argument('[id]', 'session id')
    .option('--outcome <which>', 'only failure, success, unscored, or an outcome word (every episode of the daemon)')
    .option('--json', 'JSON output')
    .action(async (id: string | undefined, o: { json?: boolean; outcome?: string }) => {
      const list =
        id && !o.outcome
          ? await client().listEpisodes(id)
          : (await client().listAllEpisodes(o.outcome ? { outcome: o.outcome } : {})).episodes.filter((e) => !id || e.session === id);
      print(!!o.json, list, () => list.map(line).join('\n') || '(no episodes)');
    });
  episodes
    .command('rm')
    .description('delete a closed episode (its events, summary and files)')
    .argument('<id>', 'session id')
    .argument('<generation>', 'the attempt')
    .action(async (id: string, g: string) => {
      await client().deleteEpisode(id, Number(g));
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
              `${r.dir}: ${r.steps} steps, ${r.frames} screenshots${r.result !== null ? `, result ${r.result}` : ''}, ${r.videoBytes !== null ? `recording.mp4 ${(r.videoBytes / 1024).toFixed(0)} KiB` : `no recording.mp4 (${r.videoSkipped})`}; ${endLine(r)}`,
          )
          .join('\n'),
      );
    });
}
