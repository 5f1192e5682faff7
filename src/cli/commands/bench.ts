import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import type { DrumsClient } from '../../client/client.ts';
import { progressLine, withDaemon } from '../util.ts';
import type { BenchHost, Opts, RecordBench } from '../../../bench/registry.ts';

const REGISTRY = new URL('../../../bench/registry.ts', import.meta.url);
/**
 * The registry (two small modules; each bench's own module loads when it runs), or null where bench/
 * is not installed: the daemon's image (deploy/kubernetes/Dockerfile) ships src/ without it.
 */
const registry = existsSync(REGISTRY) ? ((await import(REGISTRY.href)) as typeof import('../../../bench/registry.ts')) : null;

/**
 * `drums bench`: the commands come from the bench's registry (bench/registry.ts), which declares
 * each bench once; the benches' modules load only when one runs. The CLI adds what only it may
 * import: the daemon in-process and the display's encoders (BenchHost).
 */
const HOST: BenchHost = {
  startInProcess: async (env) => (await import('../../daemon.ts')).startDaemon({ env }),
  compareEncoders: async (...a) => (await import('../../display/encoder-compare.ts')).compareEncoders(...a),
};

/** Registers one record bench: its options, then run → (the record as JSON with --json) → report → `record: <file>` → its exit code. */
function registerRecordBench(bench: Command, b: RecordBench, barLines: (record: never) => string): void {
  const cmd = bench.command(b.name).description(b.description);
  if (b.argument) cmd.argument(...b.argument);
  for (const [flags, description, dflt] of b.options) cmd.option(flags, description, dflt);
  cmd.action(async (...a: unknown[]) => {
    const args = b.argument ? [a[0] as string | string[]].flat() : [];
    const o = (b.argument ? a[1] : a[0]) as Opts;
    const p = b.progress;
    const tty = process.stderr.isTTY;
    const t0 = Date.now();
    const progress =
      p === 'log'
        ? (m: string) => process.stderr.write(`[bench] ${m}\n`)
        : p === 'elapsed'
          ? (m: string) => process.stderr.write(`${tty ? '\r\x1b[K' : ''}[${Math.round((Date.now() - t0) / 1000)}s] ${m}${tty ? '' : '\n'}`)
          : progressLine(p === 'line' ? 'bench' : p.line);
    const go = async (client?: DrumsClient) => {
      const { record, file } = await b.run(o, { progress, client, args, host: HOST });
      if (p === 'line' || (typeof p === 'object' && p.newline) || (p === 'elapsed' && tty)) process.stderr.write('\n');
      if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
      process.stdout.write((b.report ?? barLines)(record as never));
      process.stdout.write(`record: ${file}\n`);
      const code = b.exitCode?.(record as never) ?? 0;
      if (code) process.exitCode = code;
    };
    if (b.daemon) await withDaemon((c) => go(c));
    else await go();
  });
}

/** `bench ...`: the DrumsBench experiments and micro-benchmarks. */
export function registerBench(program: Command): void {
  const bench = program.command('bench').description('benchmarks (records JSON under bench/records)');
  if (!registry) {
    bench
      .argument('[args...]')
      .allowUnknownOption()
      .action(() => {
        throw new Error('the bench is not installed here: bench/ comes with a checkout of the repository, not with the daemon');
      });
    return;
  }
  for (const b of registry.BENCHES) registerRecordBench(bench, b, registry.barLines);

  bench
    .command('preregister')
    .description("freeze an experiment's bars into bench/bars/<experiment>.json (with the commit and time)")
    .argument('<experiment>')
    .option('--force', 're-register (records measured against the old bars will be flagged)')
    .action(async (experiment: string, o: { force?: boolean }) => {
      const { preregister } = await import('../../../bench/bars.ts');
      const r = preregister(experiment, { force: o.force });
      process.stdout.write(
        `fixed ${r.bars.bars.length} bars for '${experiment}' in ${r.file} at ${r.bars.fixedAt} (commit ${r.bars.fixedCommit.slice(0, 12)}${r.bars.fixedDirty ? ', dirty tree' : ''}; sha256 ${r.sha256.slice(0, 12)})\n`,
      );
    });

  registerRecordBench(bench, registry.RUN, registry.barLines);
}
