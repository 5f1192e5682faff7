import { Command, Option } from 'commander';
import { writeFileSync } from 'node:fs';
import { DrumsApiError, DrumsClient, type SessionInfo } from '../client/client.ts';
import { DrumsError } from '../common/errors.ts';

/**
 * The `drums` command. Session commands talk to the daemon through the public
 * client only; `serve`, `sweep` and `image` act on this host directly.
 */
const program = new Command('drums').description('Isolated desktop sessions for computer-use agents').showHelpAfterError();

const client = () => DrumsClient.fromEnv();
/** The host-side commands' config (sweep, image): the environment, resolved once; logging follows it. */
const hostConfig = async () => {
  const [{ loadConfig }, { configureLog }] = await Promise.all([import('../common/config.ts'), import('../common/log.ts')]);
  const c = loadConfig(process.env);
  configureLog(c);
  return c;
};
const print = (json: boolean, value: unknown, text: () => string) => {
  process.stdout.write(json ? JSON.stringify(value, null, 2) + '\n' : text() + '\n');
};
const line = (s: SessionInfo) =>
  `${s.id}  ${s.state.padEnd(10)} gen ${String(s.generation).padEnd(3)} ${s.image.padEnd(8)} ${s.screen.width}x${s.screen.height}  ${s.network.address}  ${s.url ?? ''}`;

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
    const { startDaemon } = await import('../daemon.ts');
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
    const { installUnit, renderUnit } = await import('./service.ts');
    if (o.print) return void process.stdout.write(renderUnit());
    const path = installUnit(o.dir);
    process.stdout.write(`wrote ${path}; now: systemctl daemon-reload && systemctl enable --now drums\n`);
  });

program
  .command('sweep')
  .description('remove every object of this instance that no live daemon owns')
  .option('--json', 'JSON output')
  .action(async (o: { json?: boolean }) => {
    const { resolveInstance } = await import('../host/instance.ts');
    const { sweepInstance } = await import('../session/sweep.ts');
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

const image = program.command('image').description('build and list session images');
image
  .command('build')
  .argument('[name]', 'recipe name (images/<name>.json)', 'default')
  .option('--force', 'rebuild even if cached')
  .action(async (name: string, o: { force?: boolean }) => {
    const img = await import('../image/index.ts');
    const c = await hostConfig();
    const built = await img.buildImage(name, { force: o.force, onProgress: img.renderProgressToStderr(), imagesDir: c.imagesDir, mirrors: c });
    process.stdout.write(`${built.name} ${built.hash.slice(0, 12)} ${built.rootfs}\n`);
  });
image
  .command('ls')
  .option('--json', 'JSON output')
  .action(async (o: { json?: boolean }) => {
    const img = await import('../image/index.ts');
    const list = img.listImages();
    print(!!o.json, list, () => list.map((i) => `${i.name}\t${i.hash.slice(0, 12)}\t${i.dir}`).join('\n') || '(no images built)');
  });

const session = program.command('session').description('create, inspect, drive and destroy sessions');
session
  .command('create')
  .description('create a session and wait until it is ready')
  .option('--image <name>', 'image name', 'default')
  .option('--url <url>', 'open Chromium on this URL')
  .option('--screen <WxH>', 'screen size, e.g. 1280x800')
  .option('--memory-mb <n>', 'memory limit in MiB')
  .option('--disk-mb <n>', "disk quota in MiB (the session's own filesystem)")
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
    if (o.diskMb) spec.diskMb = Number(o.diskMb);
    if (o.cpus) spec.cpus = Number(o.cpus);
    if (o.egress) spec.egress = true;
    if (o.hostPort) spec.hostPorts = (o.hostPort as string[]).map(Number);
    if (o.ttl) spec.ttlSeconds = Number(o.ttl);
    const s = await client().createSession(spec);
    print(!!o.json, s, () => line(s));
  });
session
  .command('ls')
  .option('--json', 'JSON output')
  .action(async (o: { json?: boolean }) => {
    const list = await client().listSessions();
    print(!!o.json, list, () => list.map(line).join('\n') || '(no sessions)');
  });
session
  .command('get')
  .argument('<id>')
  .option('--json', 'JSON output')
  .action(async (id: string, o: { json?: boolean }) => {
    const s = await client().getSession(id);
    print(!!o.json, s, () => line(s));
  });
session
  .command('reset')
  .argument('<id>')
  .option('--json', 'JSON output')
  .action(async (id: string, o: { json?: boolean }) => {
    const s = await client().resetSession(id);
    print(!!o.json, s, () => line(s));
  });
session
  .command('rm')
  .argument('<id...>')
  .action(async (ids: string[]) => {
    for (const id of ids) await client().destroySession(id);
  });
session
  .command('exec')
  .description('run a command in the session; exits with its exit code')
  .argument('<id>')
  .argument('<cmd...>')
  .option('--root', 'run as root inside the session (still confined)')
  .option('--cwd <dir>', 'working directory')
  .option('--timeout <ms>', 'timeout in ms')
  .action(async (id: string, cmd: string[], o: { root?: boolean; cwd?: string; timeout?: string }) => {
    const r = await client().exec(id, { argv: cmd, root: !!o.root, cwd: o.cwd, timeoutMs: o.timeout ? Number(o.timeout) : undefined });
    process.stdout.write(r.stdout);
    process.stderr.write(r.stderr);
    process.exitCode = r.exitCode;
  });
session
  .command('screenshot')
  .argument('<id>')
  .requiredOption('-o, --output <file>', 'output file')
  .addOption(new Option('--format <fmt>', 'image format').choices(['png', 'jpeg', 'webp', 'raw']).default('png'))
  .option('--quality <n>', 'JPEG/WebP quality 1..100')
  .option('--region <x,y,w,h>', 'capture only this rectangle')
  .option('--scale <WxH>', 'resize the image to WxH')
  .option('--no-cursor', 'do not draw the pointer')
  .action(async (id: string, o: { output: string; format: string; quality?: string; region?: string; scale?: string; cursor?: boolean }) => {
    const region = o.region ? (([x, y, width, height]) => ({ x: x!, y: y!, width: width!, height: height! }))(o.region.split(',').map(Number)) : undefined;
    const scale = o.scale ? (([width, height]) => ({ width: width!, height: height! }))(o.scale.split('x').map(Number)) : undefined;
    const r = await client().screenshotEx(id, {
      format: o.format as 'png',
      quality: o.quality ? Number(o.quality) : undefined,
      region,
      scale,
      cursor: o.cursor === false ? false : undefined,
    });
    writeFileSync(o.output, r.data);
    process.stderr.write(`${o.output}: ${r.width}x${r.height} ${r.mimeType} (generation ${r.generation})\n`);
  });
session
  .command('act')
  .description('run a batch of actions (JSON array, or an object {actions, scale, screenshot})')
  .argument('<id>')
  .requiredOption('--json <actions>', 'actions JSON, e.g. \'[{"type":"click","x":10,"y":20}]\' (\'-\' reads stdin)')
  .option('--generation <n>', 'expected generation (409 if stale)')
  .option('--screenshot <file>', 'take a screenshot after the batch and write it here (format from the extension)')
  .action(async (id: string, o: { json: string; generation?: string; screenshot?: string }) => {
    const { readFileSync } = await import('node:fs');
    const text = o.json === '-' ? readFileSync(0, 'utf8') : o.json;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new DrumsError('invalid_json', `--json is not valid JSON: ${(e as Error).message}`);
    }
    const req = (Array.isArray(parsed) ? { actions: parsed } : parsed) as { actions: unknown[]; generation?: number; screenshot?: Record<string, unknown> };
    if (o.generation) req.generation = Number(o.generation);
    if (o.screenshot) {
      const ext = o.screenshot.split('.').pop()!.toLowerCase();
      req.screenshot = {
        ...(req.screenshot ?? {}),
        format: ext === 'jpg' || ext === 'jpeg' ? 'jpeg' : ext === 'webp' ? 'webp' : ext === 'raw' ? 'raw' : 'png',
      };
    }
    const r = await client().act(id, req as never);
    if (o.screenshot && r.screenshot) writeFileSync(o.screenshot, Buffer.from(r.screenshot.data, 'base64'));
    const out = {
      ...r,
      screenshot: r.screenshot
        ? { ...r.screenshot, data: `<${Buffer.byteLength(r.screenshot.data, 'base64')} bytes${o.screenshot ? ' → ' + o.screenshot : ''}>` }
        : undefined,
    };
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  });
session
  .command('a11y')
  .description("print the session's accessibility tree (OSWorld XML or JSON)")
  .argument('<id>')
  .addOption(new Option('--format <fmt>', 'output format').choices(['xml', 'json']).default('xml'))
  .option('--max-depth <n>', 'maximum depth')
  .option('--max-width <n>', 'maximum children per node')
  .action(async (id: string, o: { format: 'xml' | 'json'; maxDepth?: string; maxWidth?: string }) => {
    const r = await client().a11y(id, {
      format: o.format,
      maxDepth: o.maxDepth ? Number(o.maxDepth) : undefined,
      maxWidth: o.maxWidth ? Number(o.maxWidth) : undefined,
    });
    process.stdout.write((typeof r === 'string' ? r : JSON.stringify(r, null, 2)) + '\n');
  });
session
  .command('vnc')
  .description(
    'serve the session over VNC on a local TCP port for standard viewers (x11vnc in the session starts on the first viewer, stops after the last); view-only unless --take-over',
  )
  .argument('<id>')
  .option('--port <n>', 'local port on 127.0.0.1 (0 = any)', '5900')
  .option('--take-over [holder]', 'take the session over so the viewers can drive it (view-only otherwise); released on exit')
  .action(async (id: string, o: { port: string; takeOver?: string | boolean }) => {
    const net = await import('node:net');
    const c = client();
    await c.getSession(id);
    const held = o.takeOver ? await c.takeOver(id, typeof o.takeOver === 'string' ? o.takeOver : 'vnc') : null;
    if (held) process.stdout.write(`take-over: held by '${held.holder}' since ${held.since}; agent input gets 409 until this exits\n`);
    const path = `/v1/sessions/${encodeURIComponent(id)}/vnc${held ? `?takeover=${held.id}` : ''}`;
    const srv = net.createServer((tcp) => {
      const ws = c.webSocket(path, 'binary');
      const pending: Buffer[] = [];
      tcp.on('data', (d) => (ws.readyState === ws.OPEN ? ws.send(d) : pending.push(d)));
      ws.on('open', () => {
        for (const d of pending.splice(0)) ws.send(d);
      });
      ws.on('message', (d) => tcp.write(d as Buffer));
      ws.on('unexpected-response', (_q, r) => {
        process.stderr.write(`drums: vnc refused: HTTP ${r.statusCode}\n`);
        tcp.destroy();
      });
      ws.on('close', () => tcp.end());
      ws.on('error', () => tcp.destroy());
      tcp.on('close', () => ws.close());
      tcp.on('error', () => ws.terminate());
    });
    srv.listen(Number(o.port), '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      process.stdout.write(`vnc: 127.0.0.1:${port} (e.g. vncviewer 127.0.0.1::${port}); Ctrl-C to stop\n`);
    });
    const conns = new Set<import('node:net').Socket>();
    srv.on('connection', (t) => {
      conns.add(t);
      t.on('close', () => conns.delete(t));
    });
    await new Promise<void>((res) =>
      process.once('SIGINT', () => {
        srv.close();
        for (const t of conns) t.destroy();
        res();
      }),
    );
    if (held) await c.releaseTakeover(id, held.id).catch(() => {});
    process.exit(0);
  });
session
  .command('windows')
  .description("list the session's windows")
  .argument('<id>')
  .option('--json', 'JSON output')
  .action(async (id: string, o: { json?: boolean }) => {
    const w = await client().windows(id);
    print(!!o.json, w, () =>
      [
        `screen ${w.screen.width}x${w.screen.height}  cursor ${w.cursor.x},${w.cursor.y}  active ${w.active === null ? '-' : '0x' + w.active.toString(16)}`,
        ...w.windows.map((x) => `0x${x.id.toString(16).padEnd(9)} ${`${x.width}x${x.height}+${x.x}+${x.y}`.padEnd(20)} ${x.className.padEnd(16)} ${x.title}`),
      ].join('\n'),
    );
  });
session
  .command('cp')
  .description('copy a file into or out of a session; one side is ID:/abs/path')
  .argument('<src>')
  .argument('<dst>')
  .option('--root', 'as root inside the session')
  .option('--mode <octal>', 'file mode when copying in', '0644')
  .action(async (src: string, dst: string, o: { root?: boolean; mode: string }) => {
    const { readFileSync } = await import('node:fs');
    const remote = (x: string) => (/^s[0-9a-f]{10}:\//.exec(x) ? { id: x.slice(0, 11), path: x.slice(12) } : null);
    const rs = remote(src),
      rd = remote(dst);
    if (!!rs === !!rd) throw new DrumsError('invalid_request', 'exactly one of SRC and DST must be ID:/path');
    if (rs) {
      const data = await client().readFile(rs.id, rs.path, { root: o.root });
      if (dst === '-') process.stdout.write(data);
      else writeFileSync(dst, data);
    } else {
      const data = src === '-' ? readFileSync(0) : readFileSync(src);
      await client().writeFile(rd!.id, rd!.path, data, { root: o.root, mode: o.mode });
    }
  });

program
  .command('conformance')
  .description("black-box checks of a daemon's API (pass/fail table; exit 1 on any failure)")
  .argument('[url]', "daemon URL (default: DRUMS_URL or the state dir's daemon)")
  .option('--token <token>', 'bearer token (default: DRUMS_TOKEN or <state dir>/token)')
  .option('--image <name>', 'image for the sessions the checks create', 'minimal')
  .option('--filter <text>', 'only checks whose "area: name" contains this')
  .option('--json', 'JSON output')
  .action(async (url: string | undefined, o: { token?: string; image: string; filter?: string; json?: boolean }) => {
    const { runConformance, resolveTarget, formatTable } = await import('../conformance/run.ts');
    const t = resolveTarget(url, o.token);
    const results = await runConformance(t.url, t.token, { image: o.image, filter: o.filter });
    process.stdout.write(o.json ? JSON.stringify(results, null, 2) + '\n' : formatTable(results) + '\n');
    if (!results.length || results.some((r) => !r.pass)) process.exitCode = 1;
  });

const bench = program.command('bench').description('benchmarks (records JSON under bench/records)');
bench
  .command('osworld-run')
  .description("wall time of OSWorld's runnable set through `drums osworld run` at each --parallel level, with each task's outcome and the load average")
  .argument('[files...]', 'task files instead of --domains')
  .option('--tasks-root <dir>', 'OSWorld task files, a directory per domain', '../shared/osworld-tasks')
  .option('--domains <list>', 'domains', 'os,chrome,gimp,libreoffice_calc,libreoffice_impress,libreoffice_writer,vlc,thunderbird,multi_apps')
  .option('--parallel <list>', 'levels, run one after another', '1,4,8')
  .option('--level-minutes <n>', 'stop a level after this long and record what it finished', '30')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (files: string[], o: { tasksRoot: string; domains: string; parallel: string; levelMinutes: string; out: string }) => {
    const { runOsworldRunBench } = await import('../bench/osworld-run-bench.ts');
    const { record, file } = await runOsworldRunBench({
      tasksRoot: o.tasksRoot,
      domains: o.domains.split(','),
      files,
      parallel: o.parallel.split(',').map(Number),
      levelMinutes: Number(o.levelMinutes),
      outDir: o.out,
      progress: (m) => process.stderr.write(`[bench] ${m}\n`),
    });
    for (const l of record.levels as { parallel: number; wallSeconds: number; complete: boolean; summary: { ran: number } }[])
      process.stdout.write(`--parallel ${l.parallel}: ${l.wallSeconds} s, ${l.summary.ran} tasks ran${l.complete ? '' : ' (incomplete)'}\n`);
    process.stdout.write(`record: ${file}\n`);
  });
bench
  .command('pools')
  .description('warm-pool claims vs creates, disk fork(N) vs N creates, and the idle cost of a pool, in one run')
  .option('--image <name>', 'image', 'default')
  .option('--url <url>', 'URL the sessions open', 'about:blank')
  .option('--claims <n>', 'claims (and creates) to time', '20')
  .option('--pool-size <n>', 'pool size for the idle cost', '8')
  .option('--forks <list>', 'fork counts', '1,4,8')
  .option('--idle-seconds <n>', 'idle measurement window', '10')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { image: string; url: string; claims: string; poolSize: string; forks: string; idleSeconds: string; out: string }) => {
    const { runPoolsBench } = await import('../bench/pools-bench.ts');
    const { record, file } = await runPoolsBench({
      image: o.image,
      url: o.url || undefined,
      claims: Number(o.claims),
      poolSize: Number(o.poolSize),
      forkCounts: o.forks.split(',').map(Number),
      idleSeconds: Number(o.idleSeconds),
      outDir: o.out,
      progress: (m) => process.stderr.write(`[bench] ${m}\n`),
    });
    process.stdout.write(
      `claim p50 ${record.claims.claimMs.p50.toFixed(2)} ms vs create p50 ${record.claims.createMs.p50.toFixed(0)} ms; ${record.bars.claimP50Ms.pass ? 'PASS' : 'FAIL'} claimP50Ms (bar <= 20)\nrecord: ${file}\n`,
    );
  });

bench
  .command('api')
  .description('API overhead over a direct in-process call, and actions/s with 16 clients on 16 sessions')
  .option('--quick', 'fewer samples, shorter run (CI)')
  .option('--image <name>', 'image', 'minimal')
  .option('--clients <n>', 'concurrent clients = sessions', '16')
  .option('--seconds <n>', 'throughput run length')
  .option('--out <dir>', 'record directory', 'bench/records')
  .option('--json', 'print the record')
  .action(async (o: { quick?: boolean; image: string; clients: string; seconds?: string; out: string; json?: boolean }) => {
    const { runApiBench } = await import('../bench/api-bench.ts');
    const { record, file } = await runApiBench({
      quick: !!o.quick,
      image: o.image,
      outDir: o.out,
      clients: Number(o.clients),
      seconds: Number(o.seconds ?? (o.quick ? 5 : 20)),
      progress: (m) => process.stderr.write(`[bench] ${m}\n`),
      startInProcess: async (env) => (await import('../daemon.ts')).startDaemon({ env }),
    });
    if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
    for (const [k, v] of Object.entries(record.bars)) process.stdout.write(`${v.pass ? 'PASS' : 'FAIL'}  ${k.padEnd(26)} ${v.value} (bar ${v.bar})\n`);
    process.stdout.write(`record: ${file}\n`);
  });
bench
  .command('noisy')
  .description(
    'noisy neighbour: 8 sessions driven in a closed loop while one abuses CPU, memory, pids, disk and the API; ratios against quiet phases of the same run',
  )
  .option('--quick', 'short phases (CI)')
  .option('--victims <n>', 'sessions driven in a closed loop', '8')
  .option('--seconds <n>', 'length of each phase')
  .option('--rounds <n>', 'times each abuse runs (ratios pool them)')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { quick?: boolean; victims: string; seconds?: string; rounds?: string; out: string }) => {
    const { runNoisyBench } = await import('../bench/noisy-bench.ts');
    const { record, file } = await runNoisyBench({
      quick: !!o.quick,
      outDir: o.out,
      victims: Number(o.victims),
      seconds: Number(o.seconds ?? (o.quick ? 5 : 10)),
      rounds: Number(o.rounds ?? (o.quick ? 1 : 3)),
      progress: (m) => process.stderr.write(`[bench] ${m}\n`),
    });
    for (const [k, v] of Object.entries(record.bars)) process.stdout.write(`${v.pass ? 'PASS' : 'FAIL'}  ${k.padEnd(26)} ${v.value} (bar ${v.bar})\n`);
    process.stdout.write(`record: ${file}\n`);
  });
bench
  .command('soak')
  .description('soak: sessions driven for many steps with periodic resets; daemon RSS and fds must stay flat, 0 errors, 0 residue')
  .option('--quick', 'a short soak (CI)')
  .option('--sessions <n>', 'sessions, one client each', '16')
  .option('--steps <n>', 'steps per session', '1000')
  .option('--reset-every <n>', 'reset each session every this many steps', '50')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { quick?: boolean; sessions: string; steps: string; resetEvery: string; out: string }) => {
    const { runSoakBench } = await import('../bench/soak-bench.ts');
    const { record, file } = await runSoakBench({
      quick: !!o.quick,
      outDir: o.out,
      sessions: o.quick ? 2 : Number(o.sessions),
      steps: o.quick ? 100 : Number(o.steps),
      resetEvery: Number(o.resetEvery),
      progress: (m) => process.stderr.write(`[bench] ${m}\n`),
    });
    for (const [k, v] of Object.entries(record.bars)) process.stdout.write(`${v.pass ? 'PASS' : 'FAIL'}  ${k.padEnd(26)} ${v.value} (bar ${v.bar})\n`);
    process.stdout.write(`record: ${file}\n`);
  });
bench
  .command('rss')
  .description("what holds the daemon's RSS: N sessions, one screenshot each, then destroyed; per-session deltas by kind")
  .option('--sessions <n>', 'sessions', '20')
  .option('--screen <WxH>', 'screen size', '1280x800')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { sessions: string; screen: string; out: string }) => {
    const { runRssProbe } = await import('../bench/soak-bench.ts');
    const { record, file } = await runRssProbe({
      sessions: Number(o.sessions),
      screen: o.screen,
      outDir: o.out,
      progress: (m) => process.stderr.write(`\r\x1b[K[bench] ${m}`),
    });
    process.stdout.write(`\n${JSON.stringify(record.perSessionMiB)}\nrecord: ${file}\n`);
  });
bench
  .command('sessions')
  .description('lifecycle latency and memory per added session, against the session-core bars')
  .option('--quick', 'a few sessions, few runs (CI)')
  .option('--image <name>', 'image', 'default')
  .option('--runs <n>', 'sequential runs per latency')
  .option('--n <list>', 'session counts for the memory slope, e.g. 1,4,8,12,16')
  .option('--out <dir>', 'record directory', 'bench/records')
  .option('--json', 'print the record')
  .action(async (o: { quick?: boolean; image: string; runs?: string; n?: string; out: string; json?: boolean }) => {
    const { runSessionsBench } = await import('../bench/sessions-bench.ts');
    const { startPrivateDaemon } = await import('../client/private-daemon.ts');
    const daemon = process.env.DRUMS_URL ? { client: client(), stop: async () => {} } : await startPrivateDaemon();
    try {
      const { record, file } = await runSessionsBench({
        client: daemon.client,
        image: o.image,
        quick: !!o.quick,
        outDir: o.out,
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

bench
  .command('preregister')
  .description("freeze an experiment's bars into bench/bars/<experiment>.json (with the commit and time)")
  .argument('<experiment>')
  .option('--force', 're-register (records measured against the old bars will be flagged)')
  .action(async (experiment: string, o: { force?: boolean }) => {
    const { preregister } = await import('../bench/bars.ts');
    const r = preregister(experiment, { force: o.force });
    process.stdout.write(
      `fixed ${r.bars.bars.length} bars for '${experiment}' in ${r.file} at ${r.bars.fixedAt} (commit ${r.bars.fixedCommit.slice(0, 12)}${r.bars.fixedDirty ? ', dirty tree' : ''}; sha256 ${r.sha256.slice(0, 12)})\n`,
    );
  });

bench
  .command('run')
  .description('run an experiment: arms interleaved over trials, warm-ups discarded; writes a record to bench/records')
  .argument('<experiment>', 'baseline | density | vs-peer | memory-arms')
  .option('--quick', 'few sessions, one trial (CI)')
  .option('--trials <n>', 'measured trials per arm')
  .option('--arms <list>', "comma-separated subset of the experiment's arms")
  .option('--out <dir>', 'record directory (default bench/records)')
  .option('--osworld-src <dir>', 'OSWorld checkout (enables seed-guest-server)')
  .option('--json', 'print the record')
  .action(async (experiment: string, o: { quick?: boolean; trials?: string; arms?: string; out?: string; osworldSrc?: string; json?: boolean }) => {
    const { runExperiment } = await import('../bench/runner.ts');
    const tty = process.stderr.isTTY;
    const t0 = Date.now();
    const { record, file } = await runExperiment({
      experiment,
      quick: !!o.quick,
      trials: o.trials ? Number(o.trials) : undefined,
      arms: o.arms?.split(',').filter(Boolean),
      outDir: o.out,
      armOptions: { osworldSrc: o.osworldSrc },
      command: `bin/drums bench run ${process.argv.slice(process.argv.indexOf(experiment)).join(' ')}`,
      progress: (m) => process.stderr.write(`${tty ? '\r\x1b[K' : ''}[${Math.round((Date.now() - t0) / 1000)}s] ${m}${tty ? '' : '\n'}`),
    });
    if (tty) process.stderr.write('\n');
    if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
    process.stdout.write(`${record.summary}\n`);
    for (const v of record.verdicts)
      process.stdout.write(
        `${v.pass === null ? 'N/A ' : v.pass ? 'PASS' : 'FAIL'}  ${v.barId.padEnd(30)} ${v.value ?? '-'} ${v.unit} (bar ${v.op} ${v.bar})\n`,
      );
    process.stdout.write(`status: ${record.status}${record.complete ? '' : ' (incomplete)'}\nrecord: ${file}\n`);
    if (!record.complete) process.exitCode = 4;
  });

const osworld = program.command('osworld').description('OSWorld tasks on Drums sessions (real desktop_env, see docs/osworld.md)');
osworld
  .command('run')
  .description('run OSWorld task JSONs (files or directories) in parallel; prints a results table')
  .argument('<tasks...>')
  .option('--parallel <n>', 'tasks at once', '1')
  .option('--oracle <file>', 'JSON {task_id: [pyautogui code | FAIL | DONE | WAIT]} applied through env.step')
  .option('--out <file>', 'write results JSON here')
  .option('--cache <dir>', 'the shared asset cache (default $DRUMS_OSWORLD_CACHE or <state dir>/osworld-cache); a run never writes it')
  .option('--osworld-src <dir>', 'use the desktop_env of this OSWorld checkout instead of the installed desktop-env')
  .option('--allow-internet', 'start tasks that need the internet')
  .option('--group <n>', 'GRPO groups: set each task up once, fork n-1 copies, score all n (docs/pools.md)')
  .option('--verbose', 'desktop_env logging')
  .action(async (tasks: string[], o: import('../osworld/run.ts').RunOptions) => {
    const { osworldRun } = await import('../osworld/run.ts');
    process.exitCode = await osworldRun(tasks, o);
  });
const assets = osworld.command('assets').description("the asset cache: OSWorld's input and expected files in desktop_env's cache layout");
for (const action of ['fetch', 'check'] as const) {
  assets
    .command(action)
    .description(
      action === 'fetch'
        ? 'download the files these tasks need into the cache (resumable, size-verified, with progress)'
        : 'list the files these tasks need that are missing from the cache (exit 1 if any)',
    )
    .argument('<tasks...>', 'task JSON files or directories of them')
    .option('--cache <dir>', 'cache directory (default $DRUMS_OSWORLD_CACHE or <state dir>/osworld-cache)')
    .option('--mirror <url>', "fetch from this base URL instead of OSWorld's file store (or DRUMS_OSWORLD_MIRROR)")
    .option('--fonts', "include OSWorld's font pack even if no Impress task is named")
    .option('--json', 'print JSON')
    .action(async (tasks: string[], o: import('../osworld/run.ts').AssetsOptions) => {
      const { osworldAssets } = await import('../osworld/run.ts');
      process.exitCode = await osworldAssets(action, tasks, o);
    });
}
osworld
  .command('exec')
  .description("run one of OSWorld's own scripts (e.g. scripts/python/run_multienv.py --provider_name drums ...) with the drums provider")
  .argument('<script>')
  .argument('[args...]')
  .option('--osworld-src <dir>', 'the OSWorld checkout (default: the current directory when it is one)')
  .allowUnknownOption()
  .allowExcessArguments()
  .action(async (script: string, args: string[], o: { osworldSrc?: string }) => {
    const { osworldExec } = await import('../osworld/run.ts');
    process.exitCode = await osworldExec(script, args, o);
  });

const site = program.command('site').description('the DrumsBench static site');
site
  .command('build')
  .description('render every bench record into a self-contained static site')
  .option('--out <dir>', 'output directory', 'site')
  .option('--records <dir>', 'record directory (default bench/records)')
  .action(async (o: { out: string; records?: string }) => {
    const { buildSite } = await import('../site/build.ts');
    const r = buildSite({ out: o.out, records: o.records });
    process.stdout.write(
      `wrote ${r.pages.length} pages to ${r.out}${r.bad.length ? `; ${r.bad.length} unreadable records: ${r.bad.map((b) => `${b.file} (${b.errors[0]})`).join(', ')}` : ''}\n`,
    );
  });

program
  .command('audit')
  .description('isolation audit: probes from inside a session against a sibling and the host; writes a record with a verdict')
  .option('--arms <list>', 'baseline, fork (a disk-forked pair) and/or shared-browser', 'baseline')
  .option('--out <dir>', 'record directory (default bench/records)')
  .action(async (o: { arms: string; out?: string }) => {
    const { runAudit } = await import('../bench/audit.ts');
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

bench
  .command('ops')
  .description('observe/act latency through the API vs exec-spawned tools, and N sessions driven at once')
  .option('--quick', 'few runs, 4 sessions (CI)')
  .option('--runs <n>', 'runs per measurement')
  .option('--sessions <n>', 'sessions driven at once', '16')
  .option('--seconds <n>', 'how long to drive them', '10')
  .option('--out <dir>', 'record directory', 'bench/records')
  .option('--json', 'print the record')
  .action(async (o: { quick?: boolean; runs?: string; sessions: string; seconds: string; out: string; json?: boolean }) => {
    const { runOpsBench } = await import('../bench/ops-bench.ts');
    const { startPrivateDaemon } = await import('../client/private-daemon.ts');
    const daemon = process.env.DRUMS_URL ? { client: client(), stop: async () => {} } : await startPrivateDaemon();
    try {
      const { record, file } = await runOpsBench({
        client: daemon.client,
        quick: !!o.quick,
        outDir: o.out,
        runs: Number(o.runs ?? (o.quick ? 10 : 30)),
        sessions: o.quick ? Math.min(4, Number(o.sessions)) : Number(o.sessions),
        parallelSeconds: o.quick ? 5 : Number(o.seconds),
        progress: (m) => process.stderr.write(`\r\x1b[K[bench] ${m}`),
      });
      process.stderr.write('\n');
      if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
      const r = record.results as Record<string, Record<string, { p50?: number; p95?: number } | number>>;
      for (const group of ['api', 'peers']) {
        for (const [k, v] of Object.entries(r[group] ?? {}))
          process.stdout.write(
            `${group.padEnd(6)} ${k.padEnd(32)} p50 ${(v as { p50: number }).p50.toFixed(1).padStart(8)} ms  p95 ${(v as { p95: number }).p95.toFixed(1).padStart(8)} ms\n`,
          );
      }
      process.stdout.write(`ratios ${JSON.stringify(r.ratios)}\nparallel ${JSON.stringify(r.parallel)}\nrecord: ${file}\n`);
    } finally {
      await daemon.stop();
    }
  });

bench
  .command('steps')
  .description('step throughput (click + PNG) of this checkout vs another checkout in the same run; CPU per step by format; streaming')
  .option('--base <dir>', 'checkout of the code to compare with (e.g. git worktree add DIR 4c106a9), with node_modules and .runtime')
  .option('--sessions <list>', 'N ladder of Chromium sessions', '10,50,100')
  .option('--clients <n>', 'closed-loop clients', '8')
  .option('--seconds <n>', 'seconds per measurement', '20')
  .option('--offered <n>', 'open-loop offered steps/s', '50')
  .option('--trials <n>', 'trials (arms alternate, order rotated)', '1')
  .option('--quick', 'N=2, 4 s (a harness check)')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { base?: string; sessions: string; clients: string; seconds: string; offered: string; trials: string; quick?: boolean; out: string }) => {
    const { runStepsBench } = await import('../bench/steps-bench.ts');
    const { resolve, join } = await import('node:path');
    const here = resolve(import.meta.dirname, '..', '..');
    const arms = [{ name: 'frames', bin: join(here, 'bin', 'drums'), description: `this checkout (${here})` }];
    if (o.base) arms.push({ name: 'base', bin: join(resolve(o.base), 'bin', 'drums'), description: `the checkout at ${resolve(o.base)}` });
    const { record, file } = await runStepsBench({
      arms,
      sessions: o.quick ? [2] : o.sessions.split(',').map(Number),
      clients: o.quick ? 2 : Number(o.clients),
      seconds: o.quick ? 4 : Number(o.seconds),
      offered: o.quick ? 5 : Number(o.offered),
      trials: Number(o.trials),
      quick: !!o.quick,
      outDir: o.out,
      command: `bin/drums ${process.argv.slice(2).join(' ')}`,
      progress: (m) => process.stderr.write(`\r\x1b[K[bench] ${m}`),
    });
    process.stderr.write('\n');
    process.stdout.write(`${record.summary}\nrecord: ${file}\n`);
  });
bench
  .command('density')
  .description('how many Chromium sessions the host holds at once (bar: 50)')
  .option('--sessions <n>', 'sessions to hold', '50')
  .option('--concurrency <n>', 'creates in flight', '4')
  .option('--image <name>', 'image', 'default')
  .option('--out <dir>', 'record directory', 'bench/records')
  .action(async (o: { sessions: string; concurrency: string; image: string; out: string }) => {
    const { runDensityBench } = await import('../bench/density-bench.ts');
    const { startPrivateDaemon } = await import('../client/private-daemon.ts');
    const daemon = process.env.DRUMS_URL ? { client: client(), stop: async () => {} } : await startPrivateDaemon();
    try {
      const { record, file } = await runDensityBench({
        client: daemon.client,
        image: o.image,
        sessions: Number(o.sessions),
        concurrency: Number(o.concurrency),
        outDir: o.out,
        progress: (m) => process.stderr.write(`\r\x1b[K[density] ${m}`),
      });
      process.stderr.write('\n');
      const b = record.bars.concurrentBrowserSessions;
      process.stdout.write(
        `${b.pass ? 'PASS' : 'FAIL'}  concurrent Chromium sessions ${b.value} (bar >= ${b.bar}); host used ${JSON.stringify(record.results.hostUsedMiB)} MiB\nrecord: ${file}\n`,
      );
    } finally {
      await daemon.stop();
    }
  });

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
