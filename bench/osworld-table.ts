/**
 * The per-domain table of a `drums bench osworld-run --checkout` record (docs/osworld.md, "Per
 * domain and observation type"): what each domain's tasks need, and per observation type how many
 * were live, started solved, and lost an app after the first observation. Pure: the bench writes
 * it into the docs, and tests/unit/osworld-table.test.ts checks that the docs still show what the
 * record they name says.
 */
import { basename } from 'node:path';

/** What the driver (sdk/python/drums/osworld.py `task_needs`) says a task needs beyond this host. */
export interface TaskNeeds {
  files: number;
  web: string | null;
  account: string | null;
  vs_code: boolean;
}

export interface TableTask {
  task: string;
  domain: string;
  needs?: TaskNeeds;
  live?: boolean;
  startedSolved?: boolean | null;
  lost?: string[];
}

export interface TableLevel {
  parallel: number;
  observation?: string;
  complete: boolean;
  tasks: TableTask[];
}

export interface TableRecord {
  command: string;
  commit: string;
  started: string;
  config: { cache?: string | null; checkout?: string | null };
  levels: TableLevel[];
}

/** A task's one class, first that applies: VS Code, an account, the web, files from the store, nothing. */
export function needClass(n: TaskNeeds | undefined): 'vs_code' | 'account' | 'web' | 'files' | 'none' | 'unknown' {
  if (!n) return 'unknown';
  if (n.vs_code) return 'vs_code';
  if (n.account) return 'account';
  if (n.web) return 'web';
  if (n.files > 0) return 'files';
  return 'none';
}

export const BEGIN = '<!-- osworld-run-table: begin';
export const END = '<!-- osworld-run-table: end -->';

/** The markdown table (with its begin/end markers, which name the record file) for `record`. */
export function renderTable(record: TableRecord, recordPath: string): string {
  const observations = [...new Set(record.levels.map((l) => l.observation ?? 'a11y_tree'))];
  // Per observation, the first level run with it (a record may hold several --parallel levels).
  const byObs = new Map(observations.map((o) => [o, record.levels.find((l) => (l.observation ?? 'a11y_tree') === o)!]));
  const first = record.levels[0];
  const domains = [...new Set(record.levels.flatMap((l) => l.tasks.map((t) => t.domain)))].sort();
  const standIns = record.config.cache ? `the stand-in cache ${record.config.cache}` : null;
  const head = [
    'domain',
    'tasks',
    'runnable without files (live under every type)',
    `runnable with stand-in files (${standIns ? 'live under every type' : 'not run: no stand-in cache'})`,
    'needing the web',
    'needing accounts',
    'VS Code',
    ...observations.map((o) => `${o}: live / started solved / lost an app`),
  ];
  const rows: string[][] = [];
  const total = new Array(head.length - 1).fill(0) as number[];
  const totalObs = observations.map(() => [0, 0, 0]);
  const liveTotal = [0, 0];
  // tasks, none (L live), files (L live, or not run), web, account, VS Code
  const runnable = (c: number[], l: number[]) => [
    String(c[0]),
    `${c[1]} (${l[0]} live)`,
    standIns ? `${c[2]} (${l[1]} live)` : `${c[2]} (not run)`,
    ...c.slice(3, 6).map(String),
  ];
  for (const d of domains) {
    const tasks = (first?.tasks ?? []).filter((t) => t.domain === d);
    const n = (k: string) => tasks.filter((t) => needClass(t.needs) === k).length;
    const counts = [tasks.length, n('none'), n('files'), n('web'), n('account'), n('vs_code')];
    counts.forEach((c, i) => {
      total[i]! += c;
    });
    // Of the runnable ones, how many were live under every observation type of the record.
    const liveAll = (k: string) =>
      tasks.filter((t) => needClass(t.needs) === k && [...byObs.values()].every((l) => l.tasks.some((u) => u.task === t.task && u.live))).length;
    const lives = [liveAll('none'), liveAll('files')];
    liveTotal[0]! += lives[0]!;
    liveTotal[1]! += lives[1]!;
    const cells = observations.map((o, i) => {
      const l = byObs.get(o)!;
      const ts = l.tasks.filter((t) => t.domain === d);
      const v = [ts.filter((t) => t.live).length, ts.filter((t) => t.startedSolved).length, ts.filter((t) => t.lost?.length).length];
      v.forEach((x, j) => {
        totalObs[i]![j]! += x;
      });
      return `${v[0]} / ${v[1]} / ${v[2]}${l.complete ? '' : ' (incomplete)'}`;
    });
    rows.push([d, ...runnable(counts, lives), ...cells]);
  }
  rows.push(['**all**', ...runnable(total, liveTotal).map((x) => `**${x}**`), ...totalObs.map((v) => `**${v.join(' / ')}**`)]);
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [
    `${BEGIN} ${recordPath} -->`,
    `From \`${recordPath}\` (commit ${record.commit.slice(0, 7)}, ${record.started}; ${first?.tasks.length ?? 0} task files${record.config.checkout ? ` of the checkout ${basename(record.config.checkout)}` : ''}, ${standIns ?? 'an empty asset cache'}; the record's \`command\` says how it was run).`,
    '',
    line(head),
    line(head.map(() => '---')),
    ...rows.map(line),
    END,
  ].join('\n');
}

/** `doc` with its table block replaced by `table`; throws when the doc has no block. */
export function replaceTable(doc: string, table: string): string {
  const b = doc.indexOf(BEGIN);
  const e = doc.indexOf(END);
  if (b < 0 || e < b) throw new Error(`no "${BEGIN} <record> -->" ... "${END}" block to replace`);
  return doc.slice(0, b) + table + doc.slice(e + END.length);
}

/** The record path named by the doc's table block (null when it has none). */
export function tableRecordPath(doc: string): string | null {
  const m = /<!-- osworld-run-table: begin (\S+) -->/.exec(doc);
  return m ? m[1]! : null;
}
