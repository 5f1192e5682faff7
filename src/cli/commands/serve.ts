import type { Command } from 'commander';

/**
 * bin/drums preloads jemalloc into the daemon (DRUMS_MALLOC); the daemon's own
 * children (runc, nft, ip, the sessions' helpers) get the host's malloc, so the
 * preload and its settings leave the environment they inherit.
 */
export function unpreloadAllocator(env: NodeJS.ProcessEnv): void {
  if (env.DRUMS_MALLOC !== 'jemalloc' || !env.LD_PRELOAD) return;
  const rest = env.LD_PRELOAD.split(':').filter((l) => l && !/\/libjemalloc\.so[.\d]*$/.test(l));
  if (rest.length) env.LD_PRELOAD = rest.join(':');
  else delete env.LD_PRELOAD;
  delete env.MALLOC_CONF;
}

/** `serve` (the daemon in the foreground) and `install-service` (its systemd unit). */
export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run the host daemon in the foreground')
    .option('--port <n>', 'TCP port (DRUMS_PORT, default 7450; 0 = any free port)')
    .option('--host <addr>', 'listen address (DRUMS_LISTEN, default 127.0.0.1)')
    .option('--allow-remote', 'allow a non-loopback listen address (no TLS)')
    .option(
      '--keep-sessions',
      'on SIGTERM/SIGINT leave the sessions running for the next daemon to adopt (DRUMS_KEEP_SESSIONS=1); `drums sweep` then removes them',
    )
    .action(async (o: { port?: string; host?: string; allowRemote?: boolean; keepSessions?: boolean }) => {
      // A daemon whose terminal or log pipe went away must still shut down cleanly.
      process.stdout.on('error', () => {});
      process.stderr.on('error', () => {});
      unpreloadAllocator(process.env);
      const { startDaemon } = await import('../../daemon.ts');
      const d = await startDaemon({
        port: o.port === undefined ? undefined : Number(o.port),
        host: o.host,
        allowRemote: o.allowRemote,
        keepSessions: o.keepSessions,
      });
      process.stdout.write(`drums: serving ${d.url} (instance ${d.inst.name}, state ${d.inst.stateDir})\n`);
      const shutdown = (sig: string) => {
        process.stderr.write(`drums: ${sig}, ${d.keepSessions ? 'keeping sessions for the next daemon' : 'destroying sessions'}...\n`);
        d.stop().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.on('SIGINT', () => shutdown('SIGINT'));
      process.on('SIGTERM', () => shutdown('SIGTERM'));
    });

  program
    .command('install-service')
    .description('install the systemd unit (restart on failure; a stop keeps the sessions for the next daemon)')
    .option('--print', 'print the unit instead of writing it')
    .option('--dir <dir>', 'where to write drums.service', '/etc/systemd/system')
    .action(async (o: { print?: boolean; dir: string }) => {
      const { installUnit, renderUnit } = await import('../service.ts');
      if (o.print) return void process.stdout.write(renderUnit());
      const path = installUnit(o.dir);
      process.stdout.write(`wrote ${path}; now: systemctl daemon-reload && systemctl enable --now drums\n`);
    });
}
