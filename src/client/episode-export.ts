/**
 * An episode's export (docs/episodes.md, "Export"), through the public API: OSWorld's result layout (traj.jsonl,
 * step screenshots, recording.mp4 by ffmpeg, result.txt), the dataset (steps.jsonl, trees/), and episode.json with
 * where the events end. Used by `drums episodes export` and the episodes bench.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { DrumsClient, Episode, EpisodeStep } from './client.ts';

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
  /** recording.mp4's size, or null with `videoSkipped` saying why. */
  videoBytes: number | null;
  videoSkipped?: string;
  end: Episode['end'];
}

/** The longest a frame is shown in recording.mp4 (an idle screen is not minutes of the same picture). */
const MAX_FRAME_S = 5;

/**
 * recording.mp4 from the episode's kept images (the timeline), each shown until the next one, by ffmpeg (H.264, its
 * concat demuxer with per-image durations, so the video runs in the episode's own time, idle stretches capped at
 * MAX_FRAME_S). Images of another size are scaled and padded into the first one's. Undefined and a reason when
 * there is nothing to encode or no ffmpeg.
 */
export async function encodeRecording(
  timeline: NonNullable<Episode['timeline']>,
  fetchFile: (name: string) => Promise<Buffer>,
  out: string,
): Promise<{ bytes: number } | { skipped: string }> {
  if (!timeline.length) return { skipped: 'no frames were kept (record.frames 0)' };
  const work = mkdtempSync(join(tmpdir(), 'drums-mp4-'));
  try {
    const lines: string[] = ['ffconcat version 1.0'];
    const names = new Map<string, string>();
    for (const [i, f] of timeline.entries()) {
      let local = names.get(f.file);
      if (!local) {
        local = `f${names.size}.${f.file.split('.').pop()}`;
        writeFileSync(join(work, local), await fetchFile(f.file));
        names.set(f.file, local);
      }
      const next = timeline[i + 1];
      const dur = next ? Math.min(MAX_FRAME_S, Math.max(0.001, (next.at - f.at) / 1000)) : 1;
      lines.push(`file ${local}`, `duration ${dur.toFixed(3)}`);
    }
    // The concat demuxer takes the last entry's duration only when the file is named once more.
    lines.push(`file ${names.get(timeline.at(-1)!.file)}`);
    writeFileSync(join(work, 'list.ffconcat'), lines.join('\n') + '\n');
    const first = timeline.find((f) => f.width && f.height);
    const even = (n: number) => Math.max(2, Math.floor(n / 2) * 2);
    const vf = first
      ? `scale=${even(first.width!)}:${even(first.height!)}:force_original_aspect_ratio=decrease,pad=${even(first.width!)}:${even(first.height!)}:(ow-iw)/2:(oh-ih)/2`
      : 'scale=trunc(iw/2)*2:trunc(ih/2)*2';
    try {
      await promisify(execFile)(
        'ffmpeg',
        [
          '-hide_banner',
          '-loglevel',
          'error',
          '-y',
          '-f',
          'concat',
          '-i',
          join(work, 'list.ffconcat'),
          '-vf',
          `${vf},format=yuv420p`,
          '-fps_mode',
          'vfr',
          '-c:v',
          'libx264',
          '-preset',
          'veryfast',
          '-crf',
          '28',
          '-movflags',
          '+faststart',
          out,
        ],
        { timeout: 10 * 60_000, maxBuffer: 1024 * 1024 },
      );
    } catch (e) {
      const err = e as NodeJS.ErrnoException & { stderr?: string };
      if (err.code === 'ENOENT') return { skipped: 'ffmpeg not found (scripts/setup.sh installs it; apt install ffmpeg)' };
      throw new Error(`ffmpeg failed encoding recording.mp4: ${(err.stderr ?? err.message).slice(0, 500)}`);
    }
    return { bytes: statSync(out).size };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
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
  const video = await encodeRecording(ep.timeline ?? [], fetchFile, join(dir, 'recording.mp4'));
  return {
    dir,
    steps: steps.length,
    frames,
    result: reward,
    videoBytes: 'bytes' in video ? video.bytes : null,
    ...('skipped' in video ? { videoSkipped: video.skipped } : {}),
    end: ep.end,
  };
}

/** Where the episode's events end: closed, or (a live one, or a daemon killed mid-write) the last step read. */
export function endLine(r: Pick<ExportResult, 'steps' | 'end'>): string {
  const e = r.end;
  const how = e.closed ? 'closed' : `open, ending at step ${r.steps} (still recording, or its daemon was killed mid-write)`;
  return `events ${how} after ${e.lines} lines${e.partialBytes ? `; a cut last line of ${e.partialBytes} bytes skipped` : ''}${e.badLines.length ? `; unreadable lines ${e.badLines.join(',')} skipped` : ''}`;
}
