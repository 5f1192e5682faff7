import { Hono } from 'hono';
import { readFileSync } from 'node:fs';
import type { RouteContext } from '../request.ts';
import { metrics } from '../metrics.ts';
import { resourceGauges } from '../resource-metrics.ts';

type Json = Record<string, any>;

/** The spec as generated from protocol/openapi.yaml (scripts/gen-protocol.ts). */
export const OPENAPI: Json = JSON.parse(readFileSync(new URL('../../protocol/generated/openapi.json', import.meta.url), 'utf8'));

const esc = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]!);

/** Minimal Markdown for descriptions: paragraphs, `code`, **bold**. Escaped first. */
function md(text: unknown): string {
  return String(text ?? '')
    .trim()
    .split(/\n\s*\n/)
    .map(
      (p) =>
        `<p>${esc(p)
          .replace(/`([^`]+)`/g, '<code>$1</code>')
          .replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>')}</p>`,
    )
    .join('\n');
}

function resolve(doc: Json, v: Json): Json {
  let cur = v;
  for (let i = 0; cur?.$ref && i < 10; i++)
    cur = String(cur.$ref)
      .slice(2)
      .split('/')
      .reduce((o: Json, k: string) => o?.[k], doc);
  return cur ?? {};
}

function schemaText(doc: Json, s: Json | undefined, depth = 0): string {
  if (!s) return '';
  if (s.$ref) {
    const name = String(s.$ref).split('/').pop();
    return `<a href="#schema-${esc(name)}">${esc(name)}</a>`;
  }
  if (s.oneOf) return s.oneOf.map((x: Json) => schemaText(doc, x, depth)).join(' | ');
  if (s.enum) return s.enum.map((x: unknown) => `<code>${esc(JSON.stringify(x))}</code>`).join(' | ');
  const t = Array.isArray(s.type) ? s.type.join(' | ') : (s.type ?? 'object');
  if (t === 'array') return `array of ${schemaText(doc, s.items, depth)}`;
  if (s.properties && depth < 3) {
    const req = new Set(s.required ?? []);
    const rows = Object.entries(s.properties as Json)
      .map(
        ([k, v]: [string, any]) =>
          `<tr><td><code>${esc(k)}</code>${req.has(k) ? ' *' : ''}</td><td>${schemaText(doc, v, depth + 1)}</td><td>${constraints(v)}${v.description ? ' ' + md(v.description).replace(/<\/?p>/g, '') : ''}</td></tr>`,
      )
      .join('');
    return `object${s.additionalProperties === false ? ' (no other fields)' : ''}<table><tr><th>field</th><th>type</th><th>notes</th></tr>${rows}</table>`;
  }
  return esc(t);
}

function constraints(s: Json): string {
  const out: string[] = [];
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'maxItems', 'pattern', 'default'])
    if (s[k] !== undefined) out.push(`${k} ${esc(JSON.stringify(s[k]))}`);
  return out.length ? `<span class="c">${out.join(', ')}</span>` : '';
}

/** A self-contained HTML page (no scripts, no external resources) rendered from the spec. */
export function renderDocs(doc: Json): string {
  const ops: string[] = [];
  const toc: string[] = [];
  for (const [path, item] of Object.entries(doc.paths as Json)) {
    for (const method of ['get', 'post', 'put', 'patch', 'delete']) {
      const op = (item as Json)[method];
      if (!op) continue;
      const anchor = `op-${op.operationId}`;
      toc.push(`<li><a href="#${anchor}"><span class="m ${method}">${method.toUpperCase()}</span> ${esc(path)}</a></li>`);
      const params = [...((item as Json).parameters ?? []), ...(op.parameters ?? [])].map((p: Json) => resolve(doc, p));
      const paramRows = params
        .map(
          (p) =>
            `<tr><td><code>${esc(p.name)}</code>${p.required ? ' *' : ''}</td><td>${esc(p.in)}</td><td>${schemaText(doc, p.schema)} ${constraints(resolve(doc, p.schema ?? {}))}</td><td>${md(p.description).replace(/<\/?p>/g, '')}</td></tr>`,
        )
        .join('');
      const body = op.requestBody
        ? Object.entries(op.requestBody.content as Json)
            .map(([ct, c]: [string, any]) => `<div><code>${esc(ct)}</code>: ${schemaText(doc, c.schema)}</div>`)
            .join('')
        : '';
      const resps = Object.entries(op.responses as Json)
        .map(([code, r]: [string, any]) => {
          const rr = resolve(doc, r);
          const types = Object.keys(rr.content ?? {})
            .map((ct) => `<code>${esc(ct)}</code>`)
            .join(', ');
          const hdrs = Object.entries((rr.headers ?? {}) as Json)
            .map(([h, hv]: [string, any]) => {
              const hh = resolve(doc, hv);
              return `<code>${esc(h)}</code>: ${schemaText(doc, hh.schema)}${hh.description ? ' ' + md(hh.description).replace(/<\/?p>/g, '') : ''}`;
            })
            .join('<br>');
          return `<tr><td>${esc(code)}</td><td>${md(rr.description).replace(/<\/?p>/g, '')}</td><td>${types}</td><td>${hdrs}</td></tr>`;
        })
        .join('');
      ops.push(`<section id="${anchor}"><h3><span class="m ${method}">${method.toUpperCase()}</span> <code>${esc(path)}</code></h3>
<p><strong>${esc(op.summary)}</strong>${op.security && op.security.length === 0 ? ' <em>(no token)</em>' : ''}</p>${md(op.description)}
${paramRows ? `<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>type</th><th>notes</th></tr>${paramRows}</table>` : ''}
${body ? `<h4>Request body</h4>${body}` : ''}
<h4>Responses</h4><table><tr><th>status</th><th>meaning</th><th>content</th><th>headers</th></tr>${resps}</table></section>`);
    }
  }
  const schemas = Object.entries(doc.components.schemas as Json)
    .map(([name, s]) => `<section id="schema-${esc(name)}"><h3>${esc(name)}</h3>${md((s as Json).description)}${schemaText(doc, s as Json)}</section>`)
    .join('\n');
  const codes = Object.entries(doc['x-error-codes'] as Json)
    .map(([code, v]: [string, any]) => `<tr><td><code>${esc(code)}</code></td><td>${v.status}</td><td>${esc(v.description)}</td></tr>`)
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(doc.info.title)} ${esc(doc.info.version)}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
code{font:13px ui-monospace,monospace;background:#f3f3f3;padding:0 .2em;border-radius:3px}
table{border-collapse:collapse;margin:.4em 0 1em;width:100%}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#fafafa}section{border-top:1px solid #eee;padding-top:.5em}.c{color:#666;font-size:13px}
.m{display:inline-block;min-width:4.2em;text-align:center;font:bold 12px ui-monospace,monospace;color:#fff;border-radius:3px;padding:.1em .3em}
.get{background:#2b7bb9}.post{background:#2f9e44}.delete{background:#c92a2a}.put,.patch{background:#e67700}
ul.toc{columns:2;list-style:none;padding:0}
</style></head><body>
<h1>${esc(doc.info.title)} <small>${esc(doc.info.version)}</small></h1>
${md(doc.info.description)}
<p>The machine-readable document is at <a href="/openapi.json"><code>/openapi.json</code></a>.</p>
<h2>Operations</h2><ul class="toc">${toc.join('')}</ul>
${ops.join('\n')}
<h2 id="errors">Error codes</h2><table><tr><th>code</th><th>status</th><th>meaning</th></tr>${codes}</table>
<h2>Schemas</h2>${schemas}
</body></html>
`;
}

/** Warm pools: target size and fill (ready, being made) per pool. */
function poolGauges(ctx: RouteContext) {
  const pools = ctx.pools.list();
  return [
    {
      name: 'drums_pool_target',
      help: 'Target size of each warm pool.',
      values: pools.map((p) => [{ pool: p.name }, p.size] as [Record<string, string>, number]),
    },
    {
      name: 'drums_pool_sessions',
      help: 'Sessions in each warm pool, ready or being made.',
      values: pools.flatMap(
        (p) =>
          [
            [{ pool: p.name, state: 'ready' }, p.ready],
            [{ pool: p.name, state: 'creating' }, p.creating],
          ] as [Record<string, string>, number][],
      ),
    },
  ];
}

/** What /metrics shows of the CPU guard (src/policy/cpu-guard.ts). */
export interface CpuGuardView {
  /** Demotions since the daemon started. */
  demotions: number;
  /** Session ids demoted now. */
  demoted(): string[];
  /** How often it demoted this session. */
  demotionsOf(id: string): number;
}

function cpuGuardGauges(ctx: RouteContext, guard: CpuGuardView) {
  const now = new Set(guard.demoted());
  return [
    {
      name: 'drums_cpu_guard_demotions_total',
      help: 'Sessions the CPU guard demoted (cpu.idle, a 16th of the weight, a 0.03-core quota) since the daemon started.',
      type: 'counter' as const,
      values: [[{}, guard.demotions]] as [Record<string, string>, number][],
    },
    {
      name: 'drums_session_cpu_demoted',
      help: 'Whether the CPU guard has the session demoted now (1) or not (0).',
      values: ctx.mgr.list().map((s) => [{ session: s.id }, now.has(s.id) ? 1 : 0]) as [Record<string, string>, number][],
    },
    {
      name: 'drums_session_cpu_demotions',
      help: 'How often the CPU guard demoted the session (resets included).',
      values: ctx.mgr.list().map((s) => [{ session: s.id }, guard.demotionsOf(s.id)]) as [Record<string, string>, number][],
    },
  ];
}

/** What /metrics shows of the fair share between sessions (src/policy/fair-share.ts). */
function fairShareGauges(ctx: RouteContext) {
  const f = ctx.fair.stats();
  return [
    {
      name: 'drums_fair_share_running',
      help: 'Observe/act requests holding a fair-share slot now.',
      values: [[{}, f.running]] as [Record<string, string>, number][],
    },
    {
      name: 'drums_fair_share_waiting',
      help: 'Observe/act requests waiting for their turn now (all sessions).',
      values: [[{}, f.waiting]] as [Record<string, string>, number][],
    },
    {
      name: 'drums_fair_share_commands',
      help: 'Exec and guest command requests in flight now (no slot; at most DRUMS_FAIR_QUEUE per session).',
      values: [[{}, f.commands]] as [Record<string, string>, number][],
    },
    {
      name: 'drums_fair_share_sessions',
      help: 'Sessions the fair share tracks now (with a request in, or one answered in the last 250 ms).',
      values: [[{}, f.sessions]] as [Record<string, string>, number][],
    },
  ];
}

/** /openapi.json, /docs, /metrics and /v1/terminations. */
export function metaRoutes(ctx: RouteContext, cpuGuard?: CpuGuardView) {
  const app = new Hono();
  const docs = renderDocs(OPENAPI);
  app.get('/openapi.json', (c) => c.json(OPENAPI));
  app.get('/docs', (c) => c.html(docs));
  app.get('/metrics', (c) => {
    const byState = new Map<string, number>(['creating', 'ready', 'resetting', 'broken', 'destroying'].map((s) => [s, 0]));
    for (const s of ctx.mgr.list()) byState.set(s.state, (byState.get(s.state) ?? 0) + 1);
    const text = metrics.render([
      { name: 'drums_sessions', help: 'Sessions by state.', values: [...byState].map(([state, n]) => [{ state }, n]) },
      { name: 'drums_terminations_recent', help: 'Sessions destroyed in the last 15 minutes.', values: [[{}, ctx.mgr.terminations.length]] },
      ...resourceGauges(ctx.mgr),
      ...poolGauges(ctx),
      ...(cpuGuard ? cpuGuardGauges(ctx, cpuGuard) : []),
      ...fairShareGauges(ctx),
    ]);
    return c.body(text, 200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
  });
  app.get('/v1/terminations', (c) => c.json({ terminations: ctx.mgr.terminations }));
  return app;
}
