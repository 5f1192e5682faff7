// The report's figures: steps/s vs N, the headline figure above the tables on a record page, and
// one headline figure per experiment on the index.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildSite, headlineKind, throughputPlot } from '../../src/site/build.ts';
import { validateRecord, type BenchRecord } from '../../bench/record.ts';

function record(experiment: string, plots: BenchRecord['plots']): BenchRecord {
  return {
    schemaVersion: 1,
    kind: 'drums-bench-record',
    experiment,
    description: 'd',
    mode: 'full',
    status: 'passed',
    complete: true,
    incompleteReasons: [],
    command: 'x',
    commit: 'c'.repeat(40),
    dirty: false,
    started: '2026-12-01T00:00:00Z',
    finished: '2026-12-01T00:01:00Z',
    bars: null,
    host: {},
    method: {},
    config: {},
    arms: [],
    trials: [],
    results: [{ arm: 'a', metric: 'm', value: 1, ci: null, unit: 'u', n: 1 }],
    verdicts: [],
    summary: 's',
    surprises: [],
    limitations: [],
    failures: [],
    plots,
  };
}

test('throughput plot: one line per arm and trial, one point per N', () => {
  const svg = throughputPlot([
    {
      arm: 'frames',
      trial: 0,
      points: [
        { n: 10, stepsPerSec: 120 },
        { n: 50, stepsPerSec: 150 },
      ],
    },
    {
      arm: 'base',
      trial: 0,
      points: [
        { n: 10, stepsPerSec: 50 },
        { n: 50, stepsPerSec: 48 },
      ],
    },
  ]);
  assert.equal((svg.match(/<polyline class="line"/g) ?? []).length, 2);
  assert.equal((svg.match(/<circle class="pt"/g) ?? []).length, 4);
  assert.match(svg, /frames trial 0: N=50, 150 steps\/s/);
  // Higher steps/s is drawn higher (smaller y).
  const y = (t: string) => Number(new RegExp(`cy="([\\d.]+)"[^>]*><title>${t}`).exec(svg)![1]);
  assert.ok(y('frames trial 0: N=50') < y('base trial 0: N=50'));
});

test('the headline figure comes before the tables, and the index shows one per experiment', () => {
  const dir = mkdtempSync('/tmp/drums-site-test-');
  try {
    const recs = join(dir, 'records');
    mkdirSync(recs);
    const steps = record('steps', {
      latency: [{ arm: 'a', metric: 'step', samples: Array.from({ length: 50 }, (_, i) => 10 + i) }],
      throughput: [
        {
          arm: 'a',
          trial: 0,
          points: [
            { n: 1, stepsPerSec: 10 },
            { n: 2, stepsPerSec: 18 },
          ],
        },
      ],
    });
    const mem = record('memory', {
      memory: [
        {
          arm: 'a',
          trial: 0,
          points: [
            { n: 0, usedMiB: 100 },
            { n: 1, usedMiB: 210 },
            { n: 2, usedMiB: 320 },
          ],
          slope: 110,
          intercept: 100,
        },
      ],
      latency: [],
    });
    assert.deepEqual(validateRecord(steps), []);
    assert.equal(headlineKind(steps), 'throughput');
    assert.equal(headlineKind(mem), 'memory');
    writeFileSync(join(recs, 'steps-1.json'), JSON.stringify(steps));
    writeFileSync(join(recs, 'memory-1.json'), JSON.stringify(mem));
    buildSite({ out: join(dir, 'site'), records: recs });
    const page = readFileSync(join(dir, 'site', 'steps-1.html'), 'utf8');
    const headline = page.indexOf('<h2>Headline: Steps/s vs N');
    assert.ok(headline > 0 && headline < page.indexOf('<h2>Results'), 'headline above the tables');
    assert.equal((page.match(/svg class="plot throughput"/g) ?? []).length, 1, 'not repeated below');
    assert.equal((page.match(/svg class="plot latency"/g) ?? []).length, 1);
    assert.match(page, /class="p99"/);
    const index = readFileSync(join(dir, 'site', 'index.html'), 'utf8');
    const glance = index.slice(index.indexOf('<h2>At a glance'), index.indexOf('<h2>Experiments'));
    assert.equal((glance.match(/<figure>/g) ?? []).length, 2);
    assert.match(glance, /plot throughput/);
    assert.match(glance, /plot memory/);
    assert.doesNotMatch(index + page, /<script/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a noisy-neighbour record (schemaVersion 2, no results key) gets a page with its ratios and bars, not the unreadable list', () => {
  const dir = mkdtempSync('/tmp/drums-site-test-');
  try {
    const recs = join(dir, 'records');
    mkdirSync(recs);
    const noisy = {
      schemaVersion: 2,
      kind: 'noisy-neighbour',
      started: '2026-12-05T00:00:00.000Z',
      host: { cpus: 2 },
      phases: Array.from({ length: 31 }, (_, i) => ({ phase: i % 2 ? 'cpu' : 'quiet', steps: 100 + i })),
      ratios: { cpu: { p99: { median: 1.234 } } },
      bars: { cpuP99Ratio: { value: 1.234, bar: '<= 1.2', pass: false } },
    };
    writeFileSync(join(recs, 'noisy-x.json'), JSON.stringify(noisy));
    writeFileSync(join(recs, 'broken.json'), '{"schemaVersion": 3}');
    const r = buildSite({ out: join(dir, 'site'), records: recs });
    assert.ok(r.pages.includes('noisy-x.html'));
    assert.deepEqual(
      r.bad.map((b) => b.file),
      ['broken.json'],
    );
    const html = readFileSync(join(dir, 'site', 'noisy-x.html'), 'utf8');
    assert.match(html, /noisy-neighbour/);
    assert.match(html, /ratios\.cpu\.p99\.median<\/code><\/td><td>1\.23/);
    assert.match(html, /cpuP99Ratio<\/td><td>1\.234<\/td><td>&lt;= 1\.2<\/td><td>FAIL/);
    assert.doesNotMatch(html, /phases\[/, 'long arrays (31 phases) are left to the JSON');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
