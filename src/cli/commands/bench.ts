import type { Command } from 'commander';
import { printBars, progressLine, withDaemon } from '../util.ts';

/** `bench ...`: the DrumsBench experiments and micro-benchmarks. */
export function registerBench(program: Command): void {
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
      const { runOsworldRunBench } = await import('../../bench/osworld-run-bench.ts');
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
      const { runPoolsBench } = await import('../../bench/pools-bench.ts');
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
    .command('userns')
    .description('the cost of a user namespace per session against host uids: create, reset, memory and disk, side by side in one run')
    .option('--image <name>', 'image', 'default')
    .option('--url <url>', 'URL the sessions open (Chromium: its sandbox runs in the userns arm)', 'about:blank')
    .option('--sessions <n>', 'sessions per arm', '6')
    .option('--settle-seconds <n>', 'wait before memory is read', '10')
    .option('--out <dir>', 'record directory', 'bench/records')
    .action(async (o: { image: string; url: string; sessions: string; settleSeconds: string; out: string }) => {
      const { runUsernsBench } = await import('../../bench/userns-bench.ts');
      const { record, file } = await runUsernsBench({
        image: o.image,
        url: o.url || undefined,
        sessions: Number(o.sessions),
        settleSeconds: Number(o.settleSeconds),
        outDir: o.out,
        progress: (m) => process.stderr.write(`[bench] ${m}\n`),
      });
      process.stdout.write(`userns / host uids, medians: ${JSON.stringify(record.ratios)}\nrecord: ${file}\n`);
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
      const { runApiBench } = await import('../../bench/api-bench.ts');
      const { record, file } = await runApiBench({
        quick: !!o.quick,
        image: o.image,
        outDir: o.out,
        clients: Number(o.clients),
        seconds: Number(o.seconds ?? (o.quick ? 5 : 20)),
        progress: (m) => process.stderr.write(`[bench] ${m}\n`),
        startInProcess: async (env) => (await import('../../daemon.ts')).startDaemon({ env }),
      });
      if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
      printBars(record.bars);
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
    .option('--rounds <n>', 'times each abuse runs (the bars take the median ratio over them)')
    .option('--out <dir>', 'record directory', 'bench/records')
    .action(async (o: { quick?: boolean; victims: string; seconds?: string; rounds?: string; out: string }) => {
      const { runNoisyBench } = await import('../../bench/noisy-bench.ts');
      const { record, file } = await runNoisyBench({
        quick: !!o.quick,
        outDir: o.out,
        victims: Number(o.victims),
        seconds: Number(o.seconds ?? (o.quick ? 5 : 10)),
        rounds: Number(o.rounds ?? (o.quick ? 1 : 3)),
        progress: (m) => process.stderr.write(`[bench] ${m}\n`),
      });
      printBars(record.bars);
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
      const { runSoakBench } = await import('../../bench/soak-bench.ts');
      const { record, file } = await runSoakBench({
        quick: !!o.quick,
        outDir: o.out,
        sessions: o.quick ? 2 : Number(o.sessions),
        steps: o.quick ? 100 : Number(o.steps),
        resetEvery: Number(o.resetEvery),
        progress: (m) => process.stderr.write(`[bench] ${m}\n`),
      });
      printBars(record.bars);
      process.stdout.write(`record: ${file}\n`);
    });
  bench
    .command('rss')
    .description("what holds the daemon's RSS: N sessions, one screenshot each, then destroyed; per-session deltas by kind")
    .option('--sessions <n>', 'sessions', '20')
    .option('--screen <WxH>', 'screen size', '1280x800')
    .option('--out <dir>', 'record directory', 'bench/records')
    .action(async (o: { sessions: string; screen: string; out: string }) => {
      const { runRssProbe } = await import('../../bench/soak-bench.ts');
      const { record, file } = await runRssProbe({
        sessions: Number(o.sessions),
        screen: o.screen,
        outDir: o.out,
        progress: progressLine('bench'),
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
      const { runSessionsBench } = await import('../../bench/sessions-bench.ts');
      await withDaemon(async (c) => {
        const { record, file } = await runSessionsBench({
          client: c,
          image: o.image,
          quick: !!o.quick,
          outDir: o.out,
          runs: Number(o.runs ?? (o.quick ? 3 : 10)),
          memoryNs: (o.n ?? (o.quick ? '1,2,3' : '1,4,8,12,16')).split(',').map(Number),
          settleMs: o.quick ? 1000 : 5000,
          progress: progressLine('bench'),
        });
        process.stderr.write('\n');
        if (o.json) process.stdout.write(JSON.stringify(record, null, 2) + '\n');
        printBars(record.bars);
        process.stdout.write(`record: ${file}\n`);
      });
    });

  bench
    .command('preregister')
    .description("freeze an experiment's bars into bench/bars/<experiment>.json (with the commit and time)")
    .argument('<experiment>')
    .option('--force', 're-register (records measured against the old bars will be flagged)')
    .action(async (experiment: string, o: { force?: boolean }) => {
      const { preregister } = await import('../../bench/bars.ts');
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
      const { runExperiment } = await import('../../bench/runner.ts');
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
      const { runOpsBench } = await import('../../bench/ops-bench.ts');
      await withDaemon(async (c) => {
        const { record, file } = await runOpsBench({
          client: c,
          quick: !!o.quick,
          outDir: o.out,
          runs: Number(o.runs ?? (o.quick ? 10 : 30)),
          sessions: o.quick ? Math.min(4, Number(o.sessions)) : Number(o.sessions),
          parallelSeconds: o.quick ? 5 : Number(o.seconds),
          progress: progressLine('bench'),
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
      });
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
      const { runStepsBench } = await import('../../bench/steps-bench.ts');
      const { resolve, join } = await import('node:path');
      const here = resolve(import.meta.dirname, '..', '..', '..');
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
        progress: progressLine('bench'),
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
      const { runDensityBench } = await import('../../bench/density-bench.ts');
      await withDaemon(async (c) => {
        const { record, file } = await runDensityBench({
          client: c,
          image: o.image,
          sessions: Number(o.sessions),
          concurrency: Number(o.concurrency),
          outDir: o.out,
          progress: progressLine('density'),
        });
        process.stderr.write('\n');
        const b = record.bars.concurrentBrowserSessions;
        process.stdout.write(
          `${b.pass ? 'PASS' : 'FAIL'}  concurrent Chromium sessions ${b.value} (bar >= ${b.bar}); host used ${JSON.stringify(record.results.hostUsedMiB)} MiB\nrecord: ${file}\n`,
        );
      });
    });
}
