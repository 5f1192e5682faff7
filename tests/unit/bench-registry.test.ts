import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Command } from 'commander';
import { BENCHES, EXPERIMENTS, RUN } from '../../bench/registry.ts';
import { registerBench } from '../../src/cli/commands/bench.ts';

// `drums bench` is built from the bench's one registry (bench/registry.ts): each bench declares its command
// once. These tests fail when the CLI grows a command or an option the registry does not declare (or loses
// one), and when docs/bench.md's command column names a command, an experiment or a flag that does not exist,
// or leaves a command out.

/** The CLI's own `bench` command, as `drums` registers it. */
function cliBench(): Command {
  const program = new Command('drums');
  registerBench(program);
  return program.commands.find((c) => c.name() === 'bench')!;
}
/** Every command the registry declares; `preregister` (freezing bars) is the CLI's own. */
const DECLARED = [...BENCHES, RUN];

test("the CLI's bench commands and options are the registry's, name for name", () => {
  const bench = cliBench();
  assert.deepEqual(bench.commands.map((c) => c.name()).sort(), [...DECLARED.map((b) => b.name), 'preregister'].sort());
  for (const b of DECLARED) {
    const cmd = bench.commands.find((c) => c.name() === b.name)!;
    assert.equal(cmd.description(), b.description, b.name);
    assert.deepEqual(
      cmd.options.map((o) => [o.flags, o.description, o.defaultValue]),
      b.options.map(([flags, description, dflt]) => [flags, description, dflt]),
      b.name,
    );
    assert.deepEqual(
      cmd.registeredArguments.map((a) => [a.variadic ? `[${a.name()}...]` : a.required ? `<${a.name()}>` : `[${a.name()}]`, a.description]),
      b.argument ? [b.argument] : [],
      b.name,
    );
  }
});

test("docs/bench.md's command column names only commands, experiments and flags that exist, and every command", () => {
  const doc = readFileSync(new URL('../../docs/bench.md', import.meta.url), 'utf8');
  const table = doc.slice(doc.indexOf('## Commands'), doc.indexOf('\n## ', doc.indexOf('## Commands') + 1));
  const bench = cliBench();
  const seen = new Set<string>();
  let uses = 0;
  for (const row of table.split('\n').filter((l) => l.startsWith('| '))) {
    // The command column: the second cell (an escaped \| is part of a cell).
    const cell = row.split(/(?<!\\)\|/)[2] ?? '';
    for (const m of cell.matchAll(/bin\/drums bench ([\w-]+)([^`]*)/g)) {
      uses++;
      const [, name, rest] = m as unknown as [string, string, string];
      const cmd = bench.commands.find((c) => c.name() === name);
      assert.ok(cmd, `docs/bench.md names 'bin/drums bench ${name}', which is not a command`);
      seen.add(name);
      const words = rest.split('&&')[0]!.trim().split(/\s+/);
      if (name === 'run') assert.ok(words[0]! in EXPERIMENTS, `docs/bench.md: 'run ${words[0]}' is not an experiment of bench/experiments.ts`);
      for (const flag of rest.split('&&')[0]!.matchAll(/(?<![\w-])--[a-z][\w-]*/g))
        assert.ok(
          cmd.options.some((o) => o.long === flag[0]),
          `docs/bench.md: 'bin/drums bench ${name}' has no option ${flag[0]}`,
        );
    }
  }
  assert.ok(uses >= DECLARED.length, `found ${uses} commands in the table`);
  const missing = bench.commands.map((c) => c.name()).filter((n) => !seen.has(n));
  assert.deepEqual(missing, [], `commands missing from docs/bench.md's command column: ${missing.join(', ')}`);
});
