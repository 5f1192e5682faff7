import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { BARS_DIR, sha256 } from '../../bench/bars.ts';
import { validateRecord, type BenchRecord } from '../../bench/record.ts';
import { REPO_ROOT } from '../../bench/host-facts.ts';

/**
 * `drums site build`: renders every record into a self-contained static site
 * (inline CSS and SVG, no scripts, no CDN): an index of experiments and one
 * page per record.
 */
const esc = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
const fmt = (x: number | null | undefined) =>
  x === null || x === undefined || !Number.isFinite(x) ? '–' : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2);

const CSS = `body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}
.passed,.pass{background:#d9f2d9}.failed,.fail{background:#f8d7d7}.inconclusive,.na{background:#fff2cc}.badge{padding:.1em .5em;border-radius:.3em;font-weight:600}
.warn{background:#fff2cc;border-left:4px solid #e0a800;padding:.5em 1em;margin:1em 0}.bad{background:#f8d7d7;border-left:4px solid #c00;padding:.5em 1em;margin:1em 0}
code,pre{background:#f6f6f6;padding:.1em .3em}pre{padding:.6em;overflow:auto}svg{background:#fff;border:1px solid #ddd;margin:.5em 0}
.glance{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:1em}.glance figure{margin:0}.glance svg{width:100%;height:auto}`;

const page = (title: string, body: string) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title><style>${CSS}</style></head><body>${body}</body></html>\n`;

export interface LoadedRecord {
  file: string;
  slug: string;
  record: BenchRecord;
  barsFlag: string | null;
}

/** Whether the record's pre-registered bars changed after it was measured. */
export function barsFlag(r: BenchRecord, barsDir = BARS_DIR): string | null {
  if (!r.bars) return 'this record names no pre-registered bars';
  const f = join(barsDir, basename(r.bars.file));
  if (!existsSync(f)) return `the bars file ${r.bars.file} no longer exists`;
  const text = readFileSync(f, 'utf8');
  if (sha256(text) !== r.bars.sha256) {
    let at = '';
    try {
      at = ` (now fixed at ${(JSON.parse(text) as { fixedAt: string }).fixedAt})`;
    } catch {}
    return `the bars in ${r.bars.file} changed after this record was measured${at}: sha256 ${sha256(text).slice(0, 12)} now, ${r.bars.sha256.slice(0, 12)} when measured`;
  }
  if (r.bars.fixedAt > r.started) return `bars were fixed (${r.bars.fixedAt}) after the measurement started (${r.started})`;
  return null;
}

interface OtherRecord {
  file: string;
  errors: string[];
  component?: { experiment: string; started: string };
}

export function loadRecords(dir: string, barsDir = BARS_DIR): { ok: LoadedRecord[]; bad: OtherRecord[] } {
  const ok: LoadedRecord[] = [],
    bad: OtherRecord[] = [];
  if (!existsSync(dir)) return { ok, bad };
  for (const f of readdirSync(dir)
    .filter((x) => x.endsWith('.json'))
    .sort()) {
    let rec: unknown;
    try {
      rec = JSON.parse(readFileSync(join(dir, f), 'utf8'));
    } catch (e) {
      bad.push({ file: f, errors: [`not JSON: ${(e as Error).message}`] });
      continue;
    }
    const errors = validateRecord(rec);
    if (errors.length) {
      // Records of the component benches (ops, api, OSWorld, density; noisy and soak at schemaVersion 2) have their own shape.
      const o = rec as { schemaVersion?: unknown; kind?: unknown; experiment?: unknown; started?: unknown };
      const name = typeof o?.experiment === 'string' ? o.experiment : typeof o?.kind === 'string' ? o.kind : undefined;
      const component =
        o && (o.schemaVersion === 1 || o.schemaVersion === 2) && o.kind !== 'drums-bench-record' && name
          ? { experiment: name, started: String(o.started ?? '') }
          : undefined;
      bad.push({ file: f, errors, component });
      continue;
    }
    const record = rec as BenchRecord;
    ok.push({ file: f, slug: f.replace(/\.json$/, ''), record, barsFlag: barsFlag(record, barsDir) });
  }
  ok.sort((a, b) => (a.record.started < b.record.started ? 1 : -1));
  return { ok, bad };
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#17becf'];

/** Memory vs N, one colour per arm, points per trial and the fitted line. */
export function memoryPlot(series: NonNullable<BenchRecord['plots']['memory']>): string {
  if (!series.length) return '<p>No memory ladder in this record.</p>';
  const W = 640,
    H = 360,
    L = 60,
    B = 40,
    T = 20,
    R = 140;
  const pts = series.flatMap((s) => s.points);
  const maxN = Math.max(...pts.map((p) => p.n), 1);
  const ys = pts.map((p) => p.usedMiB);
  let y0 = Math.min(...ys),
    y1 = Math.max(...ys);
  if (y1 - y0 < 1) {
    y0 -= 1;
    y1 += 1;
  }
  const pad = (y1 - y0) * 0.08;
  y0 -= pad;
  y1 += pad;
  const X = (n: number) => L + (n / maxN) * (W - L - R);
  const Y = (v: number) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  const arms = [...new Set(series.map((s) => s.arm))];
  let g = `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#333"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#333"/>`;
  for (let i = 0; i <= 4; i++) {
    const v = y0 + ((y1 - y0) * i) / 4;
    g += `<text x="${L - 6}" y="${Y(v) + 4}" font-size="11" text-anchor="end">${Math.round(v)}</text><line x1="${L}" x2="${W - R}" y1="${Y(v)}" y2="${Y(v)}" stroke="#eee"/>`;
  }
  for (const n of [...new Set(pts.map((p) => p.n))]) g += `<text x="${X(n)}" y="${H - B + 16}" font-size="11" text-anchor="middle">${n}</text>`;
  g += `<text x="${(L + W - R) / 2}" y="${H - 6}" font-size="12" text-anchor="middle">sessions (N)</text><text x="14" y="${(T + H - B) / 2}" font-size="12" transform="rotate(-90 14 ${(T + H - B) / 2})" text-anchor="middle">host used MiB</text>`;
  series.forEach((s) => {
    const c = COLORS[arms.indexOf(s.arm) % COLORS.length];
    for (const p of s.points)
      g += `<circle class="pt" cx="${X(p.n).toFixed(1)}" cy="${Y(p.usedMiB).toFixed(1)}" r="4" fill="${c}"><title>${esc(s.arm)} trial ${s.trial}: N=${p.n}, ${fmt(p.usedMiB)} MiB</title></circle>`;
    const nMin = Math.min(...s.points.filter((p) => p.n > 0).map((p) => p.n));
    g += `<line class="fit" x1="${X(nMin).toFixed(1)}" y1="${Y(s.intercept + s.slope * nMin).toFixed(1)}" x2="${X(maxN).toFixed(1)}" y2="${Y(s.intercept + s.slope * maxN).toFixed(1)}" stroke="${c}" stroke-width="2"/>`;
  });
  arms.forEach((a, i) => {
    const slopes = series
      .filter((s) => s.arm === a)
      .map((s) => fmt(s.slope))
      .join(', ');
    g += `<rect x="${W - R + 10}" y="${T + i * 34}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/><text x="${W - R + 28}" y="${T + 10 + i * 34}" font-size="12">${esc(a)}</text><text x="${W - R + 28}" y="${T + 24 + i * 34}" font-size="10">${slopes} MiB/N</text>`;
  });
  return `<svg class="plot memory" xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="memory vs N">${g}</svg>`;
}

/** Latency distributions: one row per arm × metric, every sample a tick, the median a bar. */
export function latencyPlot(series: NonNullable<BenchRecord['plots']['latency']>): string {
  if (!series.length) return '<p>No latency samples in this record.</p>';
  const rowH = 26,
    L = 290,
    W = 760,
    R = 20,
    T = 20,
    B = 36;
  const H = T + B + rowH * series.length;
  const all = series.flatMap((s) => s.samples).filter((x) => x > 0);
  const lo = Math.max(1, Math.min(...all) * 0.8),
    hi = Math.max(...all) * 1.2;
  const X = (v: number) => L + ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (W - L - R);
  let g = '';
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v < lo || v > hi) continue;
      g += `<line x1="${X(v)}" x2="${X(v)}" y1="${T}" y2="${H - B}" stroke="#eee"/><text x="${X(v)}" y="${H - B + 14}" font-size="10" text-anchor="middle">${v}</text>`;
    }
  }
  g += `<text x="${(L + W - R) / 2}" y="${H - 6}" font-size="12" text-anchor="middle">ms (log scale)</text>`;
  const arms = [...new Set(series.map((s) => s.arm))];
  series.forEach((s, i) => {
    const y = T + i * rowH + rowH / 2;
    const c = COLORS[arms.indexOf(s.arm) % COLORS.length];
    const med = [...s.samples].sort((a, b) => a - b)[Math.floor((s.samples.length - 1) / 2)] ?? 0;
    g += `<text x="${L - 8}" y="${y + 4}" font-size="11" text-anchor="end">${esc(s.arm)} · ${esc(s.metric)} (n=${s.samples.length})</text>`;
    for (const v of s.samples)
      g += `<line class="tick" x1="${X(v).toFixed(1)}" x2="${X(v).toFixed(1)}" y1="${y - 7}" y2="${y + 7}" stroke="${c}" stroke-opacity=".6"/>`;
    const sorted = [...s.samples].sort((a, b) => a - b);
    const p99 = sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)] ?? 0;
    g += `<rect x="${(X(med) - 2).toFixed(1)}" y="${y - 10}" width="4" height="20" fill="#000"><title>p50 ${fmt(med)} ms</title></rect>`;
    if (sorted.length >= 20)
      g += `<rect class="p99" x="${(X(p99) - 1).toFixed(1)}" y="${y - 10}" width="2" height="20" fill="#c00"><title>p99 ${fmt(p99)} ms</title></rect>`;
  });
  return `<svg class="plot latency" xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="latency distributions">${g}</svg>`;
}

/** Steps/s against N, one line per arm and trial. */
export function throughputPlot(series: NonNullable<BenchRecord['plots']['throughput']>): string {
  const withPts = series.filter((s) => s.points.length);
  if (!withPts.length) return '<p>No throughput ladder in this record.</p>';
  const W = 640,
    H = 360,
    L = 60,
    B = 40,
    T = 20,
    R = 140;
  const pts = withPts.flatMap((s) => s.points);
  const maxN = Math.max(...pts.map((p) => p.n), 1);
  const y1 = Math.max(...pts.map((p) => p.stepsPerSec), 1) * 1.1;
  const X = (n: number) => L + (n / maxN) * (W - L - R);
  const Y = (v: number) => T + (1 - v / y1) * (H - T - B);
  const arms = [...new Set(withPts.map((s) => s.arm))];
  let g = `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#333"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#333"/>`;
  for (let i = 0; i <= 4; i++) {
    const v = (y1 * i) / 4;
    g += `<text x="${L - 6}" y="${Y(v) + 4}" font-size="11" text-anchor="end">${Math.round(v)}</text><line x1="${L}" x2="${W - R}" y1="${Y(v)}" y2="${Y(v)}" stroke="#eee"/>`;
  }
  for (const n of [...new Set(pts.map((p) => p.n))]) g += `<text x="${X(n)}" y="${H - B + 16}" font-size="11" text-anchor="middle">${n}</text>`;
  g += `<text x="${(L + W - R) / 2}" y="${H - 6}" font-size="12" text-anchor="middle">sessions (N)</text><text x="14" y="${(T + H - B) / 2}" font-size="12" transform="rotate(-90 14 ${(T + H - B) / 2})" text-anchor="middle">steps/s</text>`;
  for (const s of withPts) {
    const c = COLORS[arms.indexOf(s.arm) % COLORS.length];
    const sorted = [...s.points].sort((a, b) => a.n - b.n);
    g += `<polyline class="line" fill="none" stroke="${c}" stroke-width="2" points="${sorted.map((p) => `${X(p.n).toFixed(1)},${Y(p.stepsPerSec).toFixed(1)}`).join(' ')}"/>`;
    for (const p of sorted)
      g += `<circle class="pt" cx="${X(p.n).toFixed(1)}" cy="${Y(p.stepsPerSec).toFixed(1)}" r="4" fill="${c}"><title>${esc(s.arm)} trial ${s.trial}: N=${p.n}, ${fmt(p.stepsPerSec)} steps/s</title></circle>`;
  }
  arms.forEach((a, i) => {
    const last = withPts
      .filter((s) => s.arm === a)
      .map((s) => {
        const p = [...s.points].sort((x, y) => y.n - x.n)[0]!;
        return `${fmt(p.stepsPerSec)} at N=${p.n}`;
      })
      .join(', ');
    g += `<rect x="${W - R + 10}" y="${T + i * 34}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/><text x="${W - R + 28}" y="${T + 10 + i * 34}" font-size="12">${esc(a)}</text><text x="${W - R + 28}" y="${T + 24 + i * 34}" font-size="10">${last}</text>`;
  });
  return `<svg class="plot throughput" xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="steps per second vs N">${g}</svg>`;
}

type PlotKind = 'memory' | 'throughput' | 'latency';
const PLOT_TITLES: Record<PlotKind, string> = { memory: 'Memory vs N (fitted lines per trial)', throughput: 'Steps/s vs N', latency: 'Latency distributions' };

/** The one figure a reader sees first: memory vs N if the record has it, else steps/s vs N, else latencies. */
export function headlineKind(r: BenchRecord): PlotKind | null {
  if (r.plots.memory?.length) return 'memory';
  if (r.plots.throughput?.some((s) => s.points.length)) return 'throughput';
  if (r.plots.latency?.length) return 'latency';
  return null;
}

function plotOf(r: BenchRecord, k: PlotKind): string {
  return k === 'memory' ? memoryPlot(r.plots.memory ?? []) : k === 'throughput' ? throughputPlot(r.plots.throughput ?? []) : latencyPlot(r.plots.latency ?? []);
}

const badge = (status: string) => `<span class="badge ${esc(status)}">${esc(status)}</span>`;
const ci = (c: [number, number] | null) => (c ? `${fmt(c[0])} – ${fmt(c[1])}` : '–');

function recordPage(l: LoadedRecord): string {
  const r = l.record;
  const h = r.host as Record<string, unknown>;
  let b = `<p><a href="index.html">← all experiments</a></p><h1>${esc(r.experiment)} ${badge(r.status)} <small>${esc(r.mode)}</small></h1>`;
  if (l.barsFlag)
    b += `<div class="bad"><strong>Bars changed:</strong> ${esc(l.barsFlag)}. The verdicts below are against the bars as they were when measured.</div>`;
  if (!r.complete)
    b += `<div class="warn"><strong>Incomplete record</strong> (kept, not passed off as complete): ${r.incompleteReasons.map(esc).join('; ')}</div>`;
  if (r.mode === 'quick') b += `<div class="warn">Quick mode: a harness check with small N and one trial, not a measurement.</div>`;
  b += `<h2>Summary</h2><p>${esc(r.summary)}</p><p>${esc(r.description)}</p>`;
  const head = headlineKind(r);
  if (head) b += `<h2>Headline: ${esc(PLOT_TITLES[head])}</h2><div class="headline">${plotOf(r, head)}</div>`;
  b += r.bars
    ? `<p class="provenance">Bars fixed in <code>${esc(r.bars.fixedCommit.slice(0, 12))}</code> at ${esc(r.bars.fixedAt)}; measured in <code>${esc(r.commit.slice(0, 12))}</code>${r.dirty ? ' (uncommitted changes)' : ''} at ${esc(r.started)}. Bars file <code>${esc(r.bars.file)}</code> sha256 <code>${esc(r.bars.sha256.slice(0, 16))}</code>.</p>`
    : '<p>No pre-registered bars.</p>';
  b += `<h2>Reproduce</h2><pre>${esc(r.command)}</pre>`;
  b += `<h2>Pre-registered bars and verdicts</h2><table><tr><th>bar</th><th>arm</th><th>metric</th><th>bar</th><th>measured</th><th>95% interval</th><th>verdict</th></tr>`;
  for (const v of r.verdicts) {
    const cls = v.pass === null ? 'na' : v.pass ? 'pass' : 'fail';
    b += `<tr class="${cls}"><td>${esc(v.barId)}</td><td>${esc(v.arm)}</td><td>${esc(v.metric)}</td><td>${esc(v.op)} ${fmt(v.bar)} ${esc(v.unit)}</td><td>${fmt(v.value)}</td><td>${ci(v.ci)}</td><td>${v.pass === null ? `not measured${v.note ? ': ' + esc(v.note) : ''}` : v.pass ? 'PASS' : 'FAIL'}</td></tr>`;
  }
  b += `</table><h2>Arms</h2><table><tr><th>arm</th><th>status</th><th>isolation</th><th>description</th></tr>`;
  for (const a of r.arms) {
    const iso =
      a.isolation.verdict === 'fail'
        ? `<span class="badge fail">FAIL</span> ${esc(a.isolation.failedProbes.join(', '))}`
        : a.isolation.verdict === 'pass'
          ? '<span class="badge pass">pass</span>'
          : 'not audited';
    b += `<tr><td>${esc(a.name)}${a.unsafe ? ` <span class="badge fail" title="${esc(a.unsafe)}">unsafe</span>` : ''}</td><td>${esc(a.status)}${a.reason ? ': ' + esc(a.reason) : ''}</td><td>${iso}${a.isolation.source ? `<br><small>${esc(a.isolation.source)}</small>` : ''}</td><td>${esc(a.description)}${a.unsafe ? `<br><strong>Savings bought with isolation/safety:</strong> ${esc(a.unsafe)}` : ''}${a.tradeoff ? `<br><strong>Saving bought with isolation:</strong> ${esc(a.tradeoff)}` : ''}${a.stepNote ? `<br><small>step: ${esc(a.stepNote)}</small>` : ''}</td></tr>`;
  }
  b += `</table><h2>Results</h2><table><tr><th>arm</th><th>metric</th><th>value</th><th>95% interval</th><th>unit</th><th>n</th><th>note</th></tr>`;
  for (const x of r.results)
    b += `<tr><td>${esc(x.arm)}</td><td>${esc(x.metric)}</td><td>${fmt(x.value)}</td><td>${ci(x.ci)}</td><td>${esc(x.unit)}</td><td>${x.n}</td><td>${esc(x.note ?? '')}</td></tr>`;
  b += `</table><h2>Plots</h2>`;
  for (const k of ['memory', 'throughput', 'latency'] as PlotKind[]) {
    if (k === head || (k === 'throughput' && !r.plots.throughput?.length)) continue;
    b += `<h3>${esc(PLOT_TITLES[k])}</h3>${plotOf(r, k)}`;
  }
  if (r.audit) b += auditSection(r.audit);
  b += `<h2>Failures and surprises</h2>${r.failures.length + r.surprises.length ? `<ul>${[...r.failures, ...r.surprises].map((x) => `<li>${esc(x)}</li>`).join('')}</ul>` : '<p>None.</p>'}`;
  b += `<h2>Limitations</h2><ul>${r.limitations.map((x) => `<li>${esc(x)}</li>`).join('')}</ul>`;
  b += `<h2>Method</h2><table>${Object.entries(r.method)
    .map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`)
    .join('')}</table>`;
  b += `<h2>Setup and host</h2><table>${Object.entries(h)
    .map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(typeof v === 'object' ? JSON.stringify(v) : v)}</td></tr>`)
    .join('')}</table>`;
  b += `<h3>Configuration</h3><pre>${esc(JSON.stringify(r.config, null, 2))}</pre>`;
  b += `<h3>Trials</h3><table><tr><th>arm</th><th>trial</th><th>valid</th><th>duration</th><th>reason</th></tr>${r.trials.map((t) => `<tr class="${t.valid ? '' : 'fail'}"><td>${esc(t.arm)}</td><td>${t.warmup ? 'warm-up (discarded)' : t.trial}</td><td>${t.valid}</td><td>${fmt(t.durationMs / 1000)} s</td><td>${esc(t.reason ?? '')}</td></tr>`).join('')}</table>`;
  b += `<p><a href="records/${esc(l.file)}">raw record JSON</a></p>`;
  return page(`${r.experiment} ${r.started}`, b);
}

function auditSection(a: unknown): string {
  const au = a as { probes?: { arm: string; id: string; category: string; result: string; detail: string; as: string }[]; blastRadius?: unknown };
  let b = '<h2>Isolation probes</h2><table><tr><th>arm</th><th>probe</th><th>category</th><th>as</th><th>result</th><th>detail</th></tr>';
  for (const p of au.probes ?? [])
    b += `<tr class="${p.result === 'pass' ? 'pass' : p.result === 'fail' ? 'fail' : 'na'}"><td>${esc(p.arm)}</td><td>${esc(p.id)}</td><td>${esc(p.category)}</td><td>${esc(p.as)}</td><td>${esc(p.result)}</td><td><small>${esc(p.detail)}</small></td></tr>`;
  b += '</table>';
  if (au.blastRadius) b += `<h3>Blast radius</h3><pre>${esc(JSON.stringify(au.blastRadius, null, 2))}</pre>`;
  return b;
}

function indexPage(loaded: LoadedRecord[], bad: OtherRecord[]): string {
  let b = '<h1>DrumsBench</h1><p>Every record under <code>bench/records</code>, newest first. Failed and incomplete records are kept.</p>';
  // Headline: ratios against peer-vnc from the newest record that has them.
  const withPeer = loaded.find((l) => l.record.results.some((x) => x.arm === 'peer-vnc' && x.metric.startsWith('ratio.')));
  b += '<h2>Headline: Drums against the peer-vnc stack (same run)</h2>';
  if (withPeer) {
    const r = withPeer.record;
    b += `<p>From <a href="${esc(withPeer.slug)}.html">${esc(r.experiment)} ${esc(r.started)}</a> (${esc(r.mode)}). Ratio = peer-vnc ÷ Drums baseline; above 1 means Drums is smaller/faster.</p><table class="headline"><tr><th>metric</th><th>Drums baseline</th><th>peer-vnc</th><th>ratio</th><th>95% interval</th></tr>`;
    for (const m of ['mem_per_session_mib', 'create_browser_ready_ms.p50', 'reset_ms.p50', 'action_screenshot_ms.p50']) {
      const base = r.results.find((x) => x.arm === 'baseline' && x.metric === m);
      const peer = r.results.find((x) => x.arm === 'peer-vnc' && x.metric === m);
      const ratio = r.results.find((x) => x.arm === 'peer-vnc' && x.metric === `ratio.${m}`);
      b += `<tr><td>${esc(m)}</td><td>${fmt(base?.value)} ${esc(base?.unit ?? '')}</td><td>${fmt(peer?.value)} ${esc(peer?.unit ?? '')}</td><td>${fmt(ratio?.value)}</td><td>${ci(ratio?.ci ?? null)}</td></tr>`;
    }
    b += '</table>';
  } else {
    b += '<p>No record yet has both the baseline and peer-vnc arms; run <code>bin/drums bench run vs-peer</code>.</p>';
  }
  // At a glance: each experiment's headline figure, from its newest record.
  const newest = new Map<string, LoadedRecord>();
  for (const l of loaded) if (!newest.has(l.record.experiment)) newest.set(l.record.experiment, l);
  const glance = [...newest.values()].map((l) => ({ l, k: headlineKind(l.record) })).filter((x) => x.k);
  if (glance.length) {
    b += '<h2>At a glance</h2><div class="glance">';
    for (const { l, k } of glance)
      b += `<figure><figcaption><a href="${esc(l.slug)}.html">${esc(l.record.experiment)}</a> · ${esc(PLOT_TITLES[k!])} · ${esc(l.record.mode)} ${badge(l.record.status)}</figcaption>${plotOf(l.record, k!)}</figure>`;
    b += '</div>';
  }
  b += '<h2>Experiments</h2><table class="records"><tr><th>experiment</th><th>status</th><th>mode</th><th>measured</th><th>commit</th><th>summary</th></tr>';
  for (const l of loaded) {
    const r = l.record;
    b += `<tr><td><a href="${esc(l.slug)}.html">${esc(r.experiment)}</a></td><td>${badge(r.status)}${r.complete ? '' : ' incomplete'}${l.barsFlag ? ' <span class="badge fail">bars changed</span>' : ''}</td><td>${esc(r.mode)}</td><td>${esc(r.started)}</td><td><code>${esc(r.commit.slice(0, 12))}</code></td><td><small>${esc(r.summary.slice(0, 300))}</small></td></tr>`;
  }
  b += '</table>';
  const components = bad.filter((x) => x.component);
  const unreadable = bad.filter((x) => !x.component);
  if (components.length) {
    b +=
      '<h2>Component benchmarks</h2><p>Records of the per-area benches (observe/act, API, OSWorld, density), in their own formats.</p><table class="records"><tr><th>record</th><th>experiment</th><th>measured</th></tr>';
    for (const c of components)
      b += `<tr><td><a href="${esc(c.file.replace(/\.json$/, ''))}.html">${esc(c.file)}</a></td><td>${esc(c.component!.experiment)}</td><td>${esc(c.component!.started)}</td></tr>`;
    b += '</table>';
  }
  if (unreadable.length)
    b += `<h2>Unreadable records</h2><ul>${unreadable.map((x) => `<li><code>${esc(x.file)}</code>: ${esc(x.errors.slice(0, 3).join('; '))}</li>`).join('')}</ul>`;
  return page('DrumsBench', b);
}

/** Keys of a component record that are no result (shown apart, or not at all). */
const HEADER_KEYS = new Set(['schemaVersion', 'kind', 'experiment', 'started', 'host', 'bars', 'notes']);

/**
 * A component record (its own shape): its numbers as a flat table (its `results`, or, in records
 * without one such as noisy and soak, every other key), its bars, its JSON.
 */
function componentPage(file: string, rec: Record<string, unknown>): string {
  const rows: string[] = [];
  const walk = (v: unknown, path: string) => {
    if (typeof v === 'number' || typeof v === 'boolean' || (typeof v === 'string' && v.length < 120))
      rows.push(`<tr><td><code>${esc(path)}</code></td><td>${esc(typeof v === 'number' ? Math.round(v * 100) / 100 : v)}</td></tr>`);
    else if (Array.isArray(v)) {
      if (v.length <= 12) v.forEach((x, i) => walk(x, `${path}[${i}]`));
    } else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, path ? `${path}.${k}` : k);
  };
  walk('results' in rec ? rec.results : Object.fromEntries(Object.entries(rec).filter(([k]) => !HEADER_KEYS.has(k))), '');
  const name = rec.experiment ?? rec.kind;
  let b = `<p><a href="index.html">index</a></p><p>Experiment <b>${esc(name)}</b>, measured ${esc(rec.started)}.</p>`;
  if (rec.bars && typeof rec.bars === 'object') {
    b += '<h2>Bars</h2><table><tr><th>bar</th><th>value</th><th>target</th><th>verdict</th></tr>';
    for (const [k, v] of Object.entries(rec.bars as Record<string, { value?: unknown; bar?: unknown; pass?: boolean }>)) {
      b += `<tr><td>${esc(k)}</td><td>${esc(v.value)}</td><td>${esc(v.bar)}</td><td>${v.pass === undefined ? '' : v.pass ? 'PASS' : 'FAIL'}</td></tr>`;
    }
    b += '</table>';
  }
  b += `<h2>Results</h2><table>${rows.join('')}</table>`;
  if (Array.isArray(rec.notes)) b += `<h2>Notes</h2><ul>${(rec.notes as unknown[]).map((n) => `<li>${esc(n)}</li>`).join('')}</ul>`;
  b += `<h2>Host</h2><pre>${esc(JSON.stringify(rec.host ?? {}, null, 2))}</pre><p><a href="records/${esc(file)}">the record as JSON</a></p>`;
  return page(`${String(name)} — ${file}`, b);
}

export function buildSite(opts: { out: string; records?: string; barsDir?: string }): { out: string; pages: string[]; bad: OtherRecord[] } {
  const recordsDir = opts.records ?? join(REPO_ROOT, 'bench', 'records');
  const { ok, bad } = loadRecords(recordsDir, opts.barsDir);
  mkdirSync(join(opts.out, 'records'), { recursive: true });
  const pages = ['index.html'];
  writeFileSync(join(opts.out, 'index.html'), indexPage(ok, bad));
  for (const l of ok) {
    writeFileSync(join(opts.out, `${l.slug}.html`), recordPage(l));
    writeFileSync(join(opts.out, 'records', l.file), readFileSync(join(recordsDir, l.file)));
    pages.push(`${l.slug}.html`);
  }
  for (const c of bad) {
    if (!c.component) continue;
    const slug = c.file.replace(/\.json$/, '');
    writeFileSync(join(opts.out, `${slug}.html`), componentPage(c.file, JSON.parse(readFileSync(join(recordsDir, c.file), 'utf8'))));
    writeFileSync(join(opts.out, 'records', c.file), readFileSync(join(recordsDir, c.file)));
    pages.push(`${slug}.html`);
  }
  return { out: opts.out, pages, bad: bad.filter((x) => !x.component) };
}
