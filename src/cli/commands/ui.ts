import type { Command } from 'commander';
import { client, print } from '../util.ts';

/** `ui`: a one-time dashboard login link (the token itself never goes in a URL). */
export function registerUi(program: Command): void {
  program
    .command('ui')
    .description('print a one-time link that logs a browser into the dashboard (works once, within 60 s)')
    .option('--json', 'print {url, code, expiresAt} as JSON')
    .action(async (o: { json?: boolean }) => {
      const r = (await (await client().request('POST', '/v1/ui/login')).json()) as { url: string; code: string; expiresAt: string };
      print(o.json ?? false, r, () => r.url);
      if (!o.json) process.stderr.write(`drums: open it in a browser on this host (or through your tunnel) before ${r.expiresAt}; it works once\n`);
    });
}
