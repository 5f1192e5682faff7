import type { Command } from 'commander';

/** `conformance`: black-box checks of a daemon. */
export function registerConformance(program: Command): void {
  program
    .command('conformance')
    .description("black-box checks of a daemon's API (pass/fail table; exit 1 on any failure)")
    .argument('[url]', "daemon URL (default: DRUMS_URL or the state dir's daemon)")
    .option('--token <token>', 'bearer token (default: DRUMS_TOKEN or <state dir>/token)')
    .option('--image <name>', 'image for the sessions the checks create', 'minimal')
    .option('--filter <text>', 'only checks whose "area: name" contains this')
    .option('--json', 'JSON output')
    .action(async (url: string | undefined, o: { token?: string; image: string; filter?: string; json?: boolean }) => {
      const { runConformance, resolveTarget, formatTable } = await import('../../conformance/run.ts');
      const t = resolveTarget(url, o.token);
      const results = await runConformance(t.url, t.token, { image: o.image, filter: o.filter });
      process.stdout.write(o.json ? JSON.stringify(results, null, 2) + '\n' : formatTable(results) + '\n');
      if (!results.length || results.some((r) => !r.pass)) process.exitCode = 1;
    });
}
