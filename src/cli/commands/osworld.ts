import type { Command } from 'commander';

/** `osworld run|assets|exec`: OSWorld tasks on Drums sessions. */
export function registerOsworld(program: Command): void {
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
    .option(
      '--observation <type>',
      "observe each task as an agent with this observation type would (OSWorld run.py's --observation_type): screenshot, a11y_tree, screenshot_a11y_tree or som",
      'a11y_tree',
    )
    .option('--record [fps]', "record every attempt as an episode (frames at fps, default 2; trees kept) and attach each task's score to it (docs/episodes.md)")
    .option('--verbose', 'desktop_env logging')
    .action(async (tasks: string[], o: import('../../osworld/run.ts').RunOptions) => {
      const { osworldRun } = await import('../../osworld/run.ts');
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
      .action(async (tasks: string[], o: import('../../osworld/run.ts').AssetsOptions) => {
        const { osworldAssets } = await import('../../osworld/run.ts');
        process.exitCode = await osworldAssets(action, tasks, o);
      });
  }
  assets
    .command('standins')
    .description(
      'make a stand-in file of the right type for every file these tasks fetch, in a test cache (never the shared one): runs their real setup without the file store',
    )
    .argument('<tasks...>', 'task JSON files or directories of them')
    .requiredOption('--cache <dir>', 'the test cache to fill (refused if it is the shared cache)')
    .option('--force', 'remake files already there')
    .option('--json', 'print JSON')
    .action(async (tasks: string[], o: import('../../osworld/run.ts').AssetsOptions) => {
      const { osworldAssets } = await import('../../osworld/run.ts');
      process.exitCode = await osworldAssets('standins', tasks, o);
    });
  osworld
    .command('pool')
    .description('a pool of this task already set up: declare it (refused if the task cannot run here), then fill it by one setup and forks (docs/pools.md)')
    .argument('<task>', 'a task JSON file')
    .requiredOption('--name <name>', 'the pool name')
    .requiredOption('--size <n>', 'how many set-up sessions to keep ready')
    .option('--cache <dir>', 'the asset cache (default $DRUMS_OSWORLD_CACHE or <state dir>/osworld-cache)')
    .option('--image <name>', 'the image (default $DRUMS_OSWORLD_IMAGE or osworld)')
    .option('--allow-internet', 'a task that needs the internet (the template gets egress)')
    .option('--watch <seconds>', 'keep filling: top the pool up every this many seconds until interrupted')
    .option('--osworld-src <dir>', 'use the desktop_env of this OSWorld checkout')
    .action(async (task: string, o: import('../../osworld/run.ts').PoolOptions) => {
      const { osworldPool } = await import('../../osworld/run.ts');
      process.exitCode = await osworldPool(task, o);
    });
  osworld
    .command('exec')
    .description("run one of OSWorld's own scripts (e.g. scripts/python/run_multienv.py --provider_name drums ...) with the drums provider")
    .argument('<script>')
    .argument('[args...]')
    .option('--osworld-src <dir>', 'the OSWorld checkout (default: the current directory when it is one)')
    .allowUnknownOption()
    .allowExcessArguments()
    .action(async (script: string, args: string[], o: { osworldSrc?: string }) => {
      const { osworldExec } = await import('../../osworld/run.ts');
      process.exitCode = await osworldExec(script, args, o);
    });
}
