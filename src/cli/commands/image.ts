import type { Command } from 'commander';
import { hostConfig, print } from '../util.ts';

/** `image build|pip-lock|ls`: session images on this host. */
export function registerImage(program: Command): void {
  const image = program.command('image').description('build and list session images');
  image
    .command('build')
    .argument('[name]', 'recipe name (images/<name>.json)', 'default')
    .option('--force', 'rebuild even if cached')
    .action(async (name: string, o: { force?: boolean }) => {
      const img = await import('../../image/index.ts');
      const c = await hostConfig();
      const built = await img.buildImage(name, { force: o.force, onProgress: img.renderProgressToStderr(), imagesDir: c.imagesDir, mirrors: c });
      process.stdout.write(`${built.name} ${built.hash.slice(0, 12)} ${built.rootfs}\n`);
    });
  image
    .command('pip-lock')
    .argument('<name>', 'recipe name (images/<name>.json)')
    .description("write images/<name>.pip.lock: the sha256 of every file pip may install for the recipe's pip pins, from the package index")
    .option('--python <version>', "the image's CPython", '3.11')
    .option('--index <url>', 'the package index (PEP 691 JSON); default PIP_INDEX_URL or https://pypi.org/simple')
    .action(async (name: string, o: { python: string; index?: string }) => {
      const img = await import('../../image/index.ts');
      const path = await img.writePipLock(name, { python: o.python, index: o.index, log: (l) => process.stderr.write(`${l}\n`) });
      process.stdout.write(`${path}\n`);
    });
  image
    .command('ls')
    .option('--json', 'JSON output')
    .action(async (o: { json?: boolean }) => {
      const img = await import('../../image/index.ts');
      const list = img.listImages();
      print(!!o.json, list, () => list.map((i) => `${i.name}\t${i.hash.slice(0, 12)}\t${i.dir}`).join('\n') || '(no images built)');
    });
}
