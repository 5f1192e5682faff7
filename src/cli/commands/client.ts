import type { Command } from 'commander';
import { spawn } from 'node:child_process';
import { client, print } from '../util.ts';

/**
 * `client`: a process on the daemon's host joins the instance's client CPU cgroup (beside the daemon's,
 * with its weight), so that sessions, busy or abusive, cannot take its CPU (docs/api-host.md). The daemon
 * does the move and checks that the process is the caller's own.
 */
export function registerClient(program: Command): void {
  const cmd = program.command('client').description("join this host's client CPU cgroup (a share no session can take)");
  cmd
    .command('join')
    .description('move a process of yours (default: the shell that runs this command) into the client cgroup; its later children start there too')
    .option('--pid <pid>', 'the process to move (yours)', (v) => Number(v))
    .option('--json', 'JSON output')
    .action(async (o: { pid?: number; json?: boolean }) => {
      const pid = o.pid ?? process.ppid;
      const r = await client().joinClientCgroup(pid);
      print(!!o.json, r, () => `process ${r.pid} is in the CPU cgroup ${r.cgroup}`);
    });
  cmd
    .command('run')
    .description('run a command in the client cgroup (this process joins, then starts it): drums client run -- python train.py')
    .argument('<command...>', 'the command and its arguments')
    .action(async (argv: string[]) => {
      await client().joinClientCgroup(process.pid);
      const child = spawn(argv[0]!, argv.slice(1), { stdio: 'inherit' });
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => child.kill(sig));
      const code = await new Promise<number>((resolve) => {
        child.on('error', (e) => {
          process.stderr.write(`drums: cannot run ${argv[0]}: ${e.message}\n`);
          resolve(127);
        });
        child.on('close', (c, s) => resolve(c ?? 128 + (s ? (({ SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Record<string, number>)[s] ?? 1) : 1)));
      });
      process.exitCode = code;
    });
}
