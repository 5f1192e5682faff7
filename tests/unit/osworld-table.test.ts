import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { badObservation, OBSERVATIONS } from '../../src/common/osworld-observation.ts';
import { BEGIN, END, needClass, renderTable, replaceTable, type TableRecord, tableRecordPath } from '../../bench/osworld-table.ts';

const ROOT = resolve(import.meta.dirname, '..', '..');
const DOC = join(ROOT, 'docs', 'osworld.md');

// docs/osworld.md's per-domain table is generated from a bench record (`drums bench osworld-run
// --checkout --docs docs/osworld.md`); this keeps it true: the table must be exactly what the record
// it names renders to.
describe('the per-domain OSWorld table', () => {
  it('in docs/osworld.md is what the record it names says', () => {
    const doc = readFileSync(DOC, 'utf8');
    const rel = tableRecordPath(doc);
    assert.ok(rel, 'docs/osworld.md has no osworld-run-table block');
    assert.ok(existsSync(join(ROOT, rel)), `docs/osworld.md names ${rel}, which is not in the repository`);
    const record = JSON.parse(readFileSync(join(ROOT, rel), 'utf8')) as TableRecord;
    const shown = doc.slice(doc.indexOf(BEGIN), doc.indexOf(END) + END.length);
    assert.equal(shown, renderTable(record, rel), 'the table differs from its record: rerun the bench with --docs, or restore the table');
    assert.equal(replaceTable(doc, renderTable(record, rel)), doc);
  });

  it('counts each task in one need column, and live / started solved / lost per observation type', () => {
    const t = (task: string, domain: string, needs: Parameters<typeof needClass>[0], live = false, startedSolved = false, lost: string[] = []) => ({
      task,
      domain,
      needs,
      live,
      startedSolved,
      lost,
    });
    const none = { files: 0, web: null, account: null, vs_code: false };
    const rec: TableRecord = {
      command: 'x',
      commit: 'abcdef0123',
      started: 's',
      config: { cache: null },
      levels: [
        {
          parallel: 1,
          observation: 'screenshot',
          complete: true,
          tasks: [t('a', 'vlc', none, true), t('b', 'vlc', { ...none, files: 2, web: 'x', vs_code: true }), t('c', 'os', { ...none, files: 1 }, false, true)],
        },
        {
          parallel: 1,
          observation: 'a11y_tree',
          complete: false,
          tasks: [t('a', 'vlc', none, false, false, ['vlc']), t('b', 'vlc', { ...none, account: 'y' }), t('c', 'os', { ...none, files: 1 })],
        },
      ],
    };
    const md = renderTable(rec, 'bench/records/r.json');
    const rows = md.split('\n').filter((l) => l.startsWith('| '));
    assert.match(rows[0]!, /runnable with stand-in files \(not run: no stand-in cache\)/);
    assert.equal(rows[2], '| os | 1 | 0 (0 live) | 1 (not run) | 0 | 0 | 0 | 0 / 1 / 0 | 0 / 0 / 0 (incomplete) |');
    // vlc's task a was live under screenshot only, so not under every type.
    assert.equal(rows[3], '| vlc | 2 | 1 (0 live) | 0 (not run) | 0 | 0 | 1 | 1 / 0 / 0 | 0 / 0 / 1 (incomplete) |');
    assert.equal(rows[4], '| **all** | **3** | **1 (0 live)** | **1 (not run)** | **0** | **0** | **1** | **1 / 1 / 0** | **0 / 0 / 1** |');
    // With a stand-in cache, its column counts the file tasks live under every type.
    const withCache = renderTable({ ...rec, config: { cache: '/c' }, levels: [rec.levels[0]!] }, 'r.json');
    assert.match(withCache, /\| os \| 1 \| 0 \(0 live\) \| 1 \(0 live\) \|/);
    const live = { ...rec.levels[0]!, tasks: rec.levels[0]!.tasks.map((t) => ({ ...t, live: true })) };
    assert.match(renderTable({ ...rec, config: { cache: '/c' }, levels: [live] }, 'r.json'), /\| os \| 1 \| 0 \(0 live\) \| 1 \(1 live\) \|/);
    assert.equal(needClass(undefined), 'unknown');
  });

  it('refuses an observation type that is not one of the four', () => {
    for (const o of OBSERVATIONS) assert.equal(badObservation(o), null);
    for (const o of ['', 'SOM', 'a11y', 'screenshot,som'])
      assert.match(badObservation(o) ?? '', /is not one of screenshot, a11y_tree, screenshot_a11y_tree, som/);
  });
});
