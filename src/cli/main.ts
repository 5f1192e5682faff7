import { Command, Option } from 'commander';
import { writeFileSync } from 'node:fs';
import { DrumsApiError, DrumsClient, type SessionInfo } from '../client/client.ts';

/**
 * The `drums` command. Session commands talk to the daemon through the public
 * client only; `serve`, `sweep` and `image` act on this host directly.
 */
const program = new Command('drums').description('Isolated desktop sessions for computer-use agents').showHelpAfterError();

const client = () => DrumsClient.fromEnv();
const print = (json: boolean, value: unknown, text: () => string) => {
  process.stdout.write(json ? JSON.stringify(value, null, 2) + '\n' : text() + '\n');
};
const line = (s: SessionInfo) =>
  `${s.id}  ${s.state.padEnd(10)} gen ${String(s.generation).padEnd(3)} ${s.image.padEnd(8)} ${s.screen.width}x${s.screen.height}  ${s.network.address}  ${s.url ?? ''}`;

program.command('serve').description('run the host daemon in the foreground')
  .option('--port <n>', 'TCP port (DRUMS_PORT, default 7450; 0 = any free port)')
  .option('--host <addr>', 'listen address (DRUMS_LISTEN, default 127.0.0.1)')
  .option('--allow-remote', 'allow a non-loopback listen address (no TLS)')
  .action(async (o: { port?: string; host?: string; allowRemote?: boolean }) => {
    // A daemon whose terminal or log pipe went away must still shut down cleanly.
    process.stdout.on('error', () => {});
    process.stderr.on('error', () => {});
    const { startDaemon } = await import('../daemon.ts');
    const d = await startDaemon({ port: o.port === undefined ? undefined : Number(o.port), host: o.host, allowRemote: o.allowRemote });
    process.stdout.write(`drums: serving ${d.url} (instance ${d.inst.name}, state ${d.inst.stateDir})\n`);
    const shutdown = (sig: string) => {
      process.stderr.write(`drums: ${sig}, destroying sessions...\n`);
      d.stop().then(() => process.exit(0), () => process.exit(1));
    };
    process.on('SIGINT', () => shutdown('SIGINT'));
    process.on('SIGTERM', () => shutdown('SIGTERM'));
  });

program.command('sweep').description('remove every object of this instance that no live daemon owns')
  .option('--json', 'JSON output')
  .action(async (o: { json?: boolean }) => {
    const { resolveInstance } = await import('../host/instance.ts');
    const { sweepInstance } = await import('../session/sweep.ts');
    const inst = resolveInstance();
    const r = await sweepInstance(inst);
    print(!!o.json, r, () => {
      const n = r.containers.length + r.mounts.length + r.netns.length + r.veths.length + r.cgroups.length + r.claims.length + r.sessionDirs.length + (r.nftTable ? 1 : 0);
      return `swept instance ${inst.name}: ${n} objects (containers ${r.containers.length}, mounts ${r.mounts.length}, netns ${r.netns.length}, veths ${r.veths.length}, nft table ${r.nftTable ? 1 : 0}, cgroups ${r.cgroups.length}, claims ${r.claims.length}, dirs ${r.sessionDirs.length})${r.errors.length ? '\nerrors:\n  ' + r.errors.join('\n  ') : ''}`;
    });
    if (r.errors.length) process.exitCode = 1;
  });

const image = program.command('image').description('build and list session images');
image.command('build').argument('[name]', 'recipe name (images/<name>.json)', 'default')
  .option('--force', 'rebuild even if cached')
  .action(async (name: string, o: { force?: boolean }) => {
    const img = await import('../image/index.ts');
    const built = await img.buildImage(name, { force: o.force, onProgress: img.renderProgressToStderr() });
    process.stdout.write(`${built.name} ${built.hash.slice(0, 12)} ${built.rootfs}\n`);
  });
image.command('ls').option('--json', 'JSON output').action(async (o: { json?: boolean }) => {
  const img = await import('../image/index.ts');
  const list = img.listImages();
  print(!!o.json, list, () => list.map((i) => `${i.name}\t${i.hash.slice(0, 12)}\t${i.dir}`).join('\n') || '(no images built)');
});

const session = program.command('session').description('create, inspect, drive and destroy sessions');
session.command('create').description('create a session and wait until it is ready')
  .option('--image <name>', 'image name', 'default')
  .option('--url <url>', 'open Chromium on this URL')
  .option('--screen <WxH>', 'screen size, e.g. 1280x800')
  .option('--memory-mb <n>', 'memory limit in MiB')
  .option('--cpus <n>', 'CPU limit in cores')
  .option('--egress', 'allow internet egress (NAT)')
  .option('--host-port <port...>', 'gateway TCP ports the session may reach')
  .option('--ttl <seconds>', 'destroy after this many seconds')
  .option('--json', 'JSON output')
  .action(async (o: Record<string, string | boolean | string[] | undefined>) => {
    const spec: Record<string, unknown> = { image: o.image };
    if (o.url) spec.url = o.url;
    if (o.screen) spec.screen = o.screen;
    if (o.memoryMb) spec.memoryMb = Number(o.memoryMb);
    if (o.cpus) spec.cpus = Number(o.cpus);
    if (o.egress) spec.egress = true;
    if (o.hostPort) spec.hostPorts = (o.hostPort as string[]).map(Number);
    if (o.ttl) spec.ttlSeconds = Number(o.ttl);
    const s = await client().createSession(spec);
    print(!!o.json, s, () => line(s));
  });
session.command('ls').option('--json', 'JSON output').action(async (o: { json?: boolean }) => {
  const list = await client().listSessions();
  print(!!o.json, list, () => list.map(line).join('\n') || '(no sessions)');
});
session.command('get').argument('<id>').option('--json', 'JSON output').action(async (id: string, o: { json?: boolean }) => {
  const s = await client().getSession(id);
  print(!!o.json, s, () => line(s));
});
session.command('reset').argument('<id>').option('--json', 'JSON output').action(async (id: string, o: { json?: boolean }) => {
  const s = await client().resetSession(id);
  print(!!o.json, s, () => line(s));
});
session.command('rm').argument('<id...>').action(async (ids: string[]) => {
  for (const id of ids) await client().destroySession(id);
});
session.command('exec').description('run a command in the session; exits with its exit code')
  .argument('<id>').argument('<cmd...>')
  .option('--root', 'run as root inside the session (still confined)')
  .option('--cwd <dir>', 'working directory')
  .option('--timeout <ms>', 'timeout in ms')
  .action(async (id: string, cmd: string[], o: { root?: boolean; cwd?: string; timeout?: string }) => {
    const r = await client().exec(id, { argv: cmd, root: !!o.root, cwd: o.cwd, timeoutMs: o.timeout ? Number(o.timeout) : undefined });
    process.stdout.write(r.stdout);
    process.stderr.write(r.stderr);
    process.exitCode = r.exitCode;
  });
session.command('screenshot').argument('<id>')
  .requiredOption('-o, --output <file>', 'output file')
  .addOption(new Option('--format <fmt>', 'image format').choices(['png', 'jpeg', 'webp', 'raw']).default('png'))
  .action(async (id: string, o: { output: string; format: string }) => {
    const data = await client().screenshot(id, o.format);
    writeFileSync(o.output, data);
  });

const bench = program.command('bench').description('benchmarks (records JSON under bench/records)');
bench.command('sessions').description('lifecycle latency and memory per added session, against the session-core bars')
  .option('--quick', 'a few sessions, few runs (CI)')
  .option('--image <name>', 'image', 'default')
  .option('--runs <n>', 'sequential runs per latency')
  .option('--n <list>', 'session counts for the memory slope, e.g. 1,4,8,12,16')
  .option('--out <dir>', 'record directory', 'bench/records')
  .option('--json', 'print the record')
  .action(async (o: { quick?: boolean; image: string; runs?: string; n?: string; out: string; json?: boolean }) => {
    const { runSessionsBench } = await import('../bench/sessions-bench.ts');
    const { startPrivateDaemon } = await import('../bench/private-daemon.ts');
    const daemon = process.env.DRUMS_URL ? { client: client(), stop: async () => {} } : await startPrivateDaemon();
    try {
      const { record, file } = await runSessionsBench({
        client: daemon.client, image: o.image, quick: !!o.quick, outDir: o.out,
        runs: Number(o.runs ?? (o.quick ? 3 : 10)),
        memoryNs: (o.n ?? (o.quick ? '1,2,3' : '1,4,8,12,16')).split(',').map(Number),
        settleMs: o.quick ? 1000 : 5000,
        progress: (m) => process.stderr.write(`\r\x1b[K[bench] ${m}`),
      });
      process.stderr.write('\n');
      if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
      for (const [k, v] of Object.entries(record.bars)) process.stdout.write(`${v.pass ? 'PASS' : 'FAIL'}  ${k.padEnd(26)} ${v.value} (bar ${v.bar})\n`);
      process.stdout.write(`record: ${file}\n`);
    } finally {
      await daemon.stop();
    }
  });

program.parseAsync(process.argv).catch((e: unknown) => {
  if (e instanceof DrumsApiError) {
    process.stderr.write(`drums: ${e.code}: ${e.message}\n`);
    process.exitCode = e.status >= 500 ? 3 : 2;
  } else {
    const err = e as { code?: string; message?: string };
    process.stderr.write(`drums: ${err.code ? err.code + ': ' : ''}${err.message ?? String(e)}\n`);
    process.exitCode = 1;
  }
});
