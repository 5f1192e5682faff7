import type { Command } from 'commander';

/** `site build`: the static report site. */
export function registerSite(program: Command): void {
  const site = program.command('site').description('the DrumsBench static site');
  site
    .command('build')
    .description('render every bench record into a self-contained static site')
    .option('--out <dir>', 'output directory', 'site')
    .option('--records <dir>', 'record directory (default bench/records)')
    .action(async (o: { out: string; records?: string }) => {
      const { buildSite } = await import('../../site/build.ts');
      const r = buildSite({ out: o.out, records: o.records });
      process.stdout.write(
        `wrote ${r.pages.length} pages to ${r.out}${r.bad.length ? `; ${r.bad.length} unreadable records: ${r.bad.map((b) => `${b.file} (${b.errors[0]})`).join(', ')}` : ''}\n`,
      );
    });
}
