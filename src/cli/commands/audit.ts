import { existsSync } from 'node:fs';
import type { Command } from 'commander';

/** `audit`: the isolation audit. */
export function registerAudit(program: Command): void {
  program
    .command('audit')
    .description('isolation audit: probes from inside a session against a sibling and the host; writes a record with a verdict')
    .option('--arms <list>', 'baseline, fork (a disk-forked pair), memfork (a memory-forked pair) and/or shared-browser', 'baseline')
    .option('--out <dir>', 'record directory (default bench/records)')
    .action(async (o: { arms: string; out?: string }) => {
      // bench/ is not in the daemon's image (deploy/kubernetes/Dockerfile ships src/): the audit runs from a checkout.
      if (!existsSync(new URL('../../../bench/audit.ts', import.meta.url)))
        throw new Error('the audit is not installed here: bench/ comes with a checkout of the repository, not with the daemon');
      const { runAudit } = await import('../../../bench/audit.ts');
      const t0 = Date.now();
      const { record, file } = await runAudit({
        arms: o.arms.split(',').filter(Boolean),
        outDir: o.out,
        progress: (m) => process.stderr.write(`[${Math.round((Date.now() - t0) / 1000)}s] ${m}\n`),
      });
      const probes = (record.audit as { probes: { arm: string; id: string; as: string; result: string; detail: string }[] }).probes;
      for (const p of probes) if (p.result !== 'pass') process.stdout.write(`${p.result.toUpperCase().padEnd(7)} ${p.arm} ${p.id} (${p.as}): ${p.detail}\n`);
      process.stdout.write(`${record.summary}\nstatus: ${record.status}\nrecord: ${file}\n`);
      if (record.status !== 'passed') process.exitCode = record.status === 'failed' ? 5 : 4;
    });
}
