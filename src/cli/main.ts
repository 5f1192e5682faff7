import { Command } from 'commander';
import { DrumsApiError } from '../client/client.ts';
import { registerAudit } from './commands/audit.ts';
import { registerBench } from './commands/bench.ts';
import { registerClient } from './commands/client.ts';
import { registerConformance } from './commands/conformance.ts';
import { registerEpisodes } from './commands/episodes.ts';
import { registerImage } from './commands/image.ts';
import { registerOsworld } from './commands/osworld.ts';
import { registerServe } from './commands/serve.ts';
import { registerSession } from './commands/session.ts';
import { registerSite } from './commands/site.ts';
import { registerSweep } from './commands/sweep.ts';
import { registerUi } from './commands/ui.ts';

/**
 * The `drums` command: parses and dispatches; each command group lives in
 * `commands/<group>.ts`. Session commands talk to the daemon through the
 * public client only; `serve`, `sweep` and `image` act on this host directly.
 * Registration order is the order `drums --help` lists the commands in.
 */
const program = new Command('drums').description('Isolated desktop sessions for computer-use agents').showHelpAfterError();
registerServe(program);
registerSweep(program);
registerImage(program);
registerSession(program);
registerClient(program);
registerEpisodes(program);
registerUi(program);
registerConformance(program);
registerBench(program);
registerOsworld(program);
registerSite(program);
registerAudit(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  if (e instanceof DrumsApiError) {
    process.stderr.write(`drums: ${e.code}: ${e.message}\n`);
    process.exitCode = e.status === 0 ? 1 : e.status >= 500 ? 3 : 2;
  } else {
    const err = e as { code?: string; message?: string };
    process.stderr.write(`drums: ${err.code ? err.code + ': ' : ''}${err.message ?? String(e)}\n`);
    process.exitCode = 1;
  }
});
