import type { Command } from 'commander';
import { hostConfig, print } from '../util.ts';

/** `sweep`: removes what no live daemon of this instance owns. */
export function registerSweep(program: Command): void {
  program
    .command('sweep')
    .description('remove every object of this instance that no live daemon owns')
    .option('--json', 'JSON output')
    .action(async (o: { json?: boolean }) => {
      const { resolveInstance } = await import('../../host/instance.ts');
      const { sweepInstance } = await import('../../session/sweep.ts');
      const inst = resolveInstance(await hostConfig());
      const r = await sweepInstance(inst);
      print(!!o.json, r, () => {
        const n =
          r.containers.length +
          r.mounts.length +
          r.netns.length +
          r.veths.length +
          r.cgroups.length +
          r.claims.length +
          r.sessionDirs.length +
          (r.nftTable ? 1 : 0);
        return `swept instance ${inst.name}: ${n} objects (containers ${r.containers.length}, mounts ${r.mounts.length}, netns ${r.netns.length}, veths ${r.veths.length}, nft table ${r.nftTable ? 1 : 0}, cgroups ${r.cgroups.length}, claims ${r.claims.length}, dirs ${r.sessionDirs.length})${r.errors.length ? '\nerrors:\n  ' + r.errors.join('\n  ') : ''}`;
      });
      if (r.errors.length) process.exitCode = 1;
    });
}
