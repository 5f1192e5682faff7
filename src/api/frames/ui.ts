/**
 * The live dashboard at GET /ui (the token as `Authorization`, or, in a browser, the login cookie
 * a one-time code from `drums ui` buys: src/api/ui-login.ts; the page itself never holds a secret). One
 * self-contained page, no external scripts: every session as a live thumbnail (a 2 fps stream)
 * with its state, generation, image, labels, take-over, CPU and memory; click one to watch it
 * at full rate, take it over, drive it with mouse and keyboard, and release it.
 */
import { randomBytes } from 'node:crypto';
import { Hono } from 'hono';
import type { RouteContext } from '../request.ts';
import { pruneUsage, sessionUsage } from './usage.ts';
import { takeoverView } from './takeover.ts';

const PAGE = (nonce: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Drums</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#111;color:#ddd}
header{padding:8px 14px;background:#222;display:flex;gap:16px;align-items:center}
header b{font-size:16px} #status{color:#999}
#grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:10px;padding:10px}
.card{background:#1c1c1c;border:1px solid #333;border-radius:6px;cursor:pointer;overflow:hidden}
.card:hover{border-color:#6af}.card img{width:100%;display:block;background:#000;aspect-ratio:16/10;object-fit:contain}
.meta{padding:6px 8px;font-size:12px;line-height:1.5}.meta .id{font-weight:bold;color:#fff}
.st-ready{color:#7d7}.st-resetting{color:#fd6}.st-broken,.st-creating{color:#f77}.held{color:#f96;font-weight:bold}
#detail{display:none;padding:10px}#detail.on{display:block}#grid.off{display:none}
#view{max-width:100%;outline:2px solid #333;cursor:crosshair;display:block}#view.taken{outline-color:#f96}
button{background:#335;color:#fff;border:1px solid #558;border-radius:4px;padding:4px 10px;cursor:pointer}
#bar{display:flex;gap:8px;align-items:center;margin-bottom:8px}#msg{color:#f96}
</style></head><body>
<header><b>Drums</b><span id="status">connecting…</span></header>
<div id="grid"></div>
<div id="detail"><div id="bar"><button id="back">← all sessions</button><span id="title"></span>
<button id="take">Take over</button><button id="release" hidden>Release</button><span id="msg"></span></div>
<img id="view" tabindex="0" alt="session screen"></div>
<script nonce="${nonce}">
(() => {
  // Authenticated by the HttpOnly login cookie, which the browser sends on these same-origin calls.
  const H = {};
  const $ = (id) => document.getElementById(id);
  const thumbs = new Map();           // id -> {card, ws}
  let watching = null;                // {id, ws, takeover}
  const api = async (method, path, body, extra) => {
    const r = await fetch(path, { method, headers: { ...H, ...(body ? { 'content-type': 'application/json' } : {}), ...(extra || {}) }, body: body ? JSON.stringify(body) : undefined });
    if (!r.ok && r.status !== 204) { let e = { code: 'http_' + r.status, message: r.statusText }; try { e = (await r.json()).error; } catch {} throw Object.assign(new Error(e.message), { code: e.code }); }
    return r.status === 204 ? null : r.json();
  };
  const wsUrl = (id, params) => (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/sessions/' + id + '/stream?' + new URLSearchParams(params);
  const openStream = (id, params, onFrame, onText) => {
    const ws = new WebSocket(wsUrl(id, params), ['drums']);
    ws.binaryType = 'blob';
    ws.onmessage = (ev) => { if (typeof ev.data === 'string') onText && onText(JSON.parse(ev.data)); else onFrame(ev.data); };
    return ws;
  };
  const show = (img, blob) => { const u = URL.createObjectURL(blob); const old = img.src; img.src = u; img.dataset.frames = String(Number(img.dataset.frames || 0) + 1); if (old.startsWith('blob:')) URL.revokeObjectURL(old); };
  const mb = (b) => b == null ? '–' : (b / 1048576).toFixed(0) + ' MiB';
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

  function renderCard(s, u) {
    let t = thumbs.get(s.id);
    if (!t) {
      const card = document.createElement('div');
      card.className = 'card'; card.dataset.id = s.id;
      card.innerHTML = '<img alt="thumbnail"><div class="meta"></div>';
      card.onclick = () => watch(s.id);
      $('grid').appendChild(card);
      const ws = openStream(s.id, { fps: '2', scale: '0.25', format: 'jpeg', quality: '60' }, (b) => show(card.querySelector('img'), b));
      t = { card, ws };
      thumbs.set(s.id, t);
    }
    const labels = Object.entries(s.labels || {}).map(([k, v]) => esc(k + '=' + v)).join(' ');
    t.card.querySelector('.meta').innerHTML =
      '<span class="id">' + esc(s.id) + '</span> <span class="st-' + esc(s.state) + '">' + esc(s.state) + '</span> gen ' + esc(s.generation) +
      '<br>' + esc(s.image) + (s.pool ? ' · pool ' + esc(typeof s.pool === 'object' ? s.pool.name || '' : s.pool) : '') + (labels ? ' · ' + labels : '') +
      '<br>CPU ' + (u && u.cpuPercent != null ? u.cpuPercent.toFixed(1) + '%' : '–') + ' · mem ' + mb(u && u.memoryBytes) +
      (s.takeover ? '<br><span class="held">taken over by ' + esc(s.takeover.holder) + ' since ' + esc(new Date(s.takeover.since).toLocaleTimeString()) + '</span>' : '');
  }

  async function refresh() {
    try {
      const [{ sessions }, { sessions: usage }] = await Promise.all([api('GET', '/v1/sessions'), api('GET', '/v1/usage')]);
      const byId = new Map(usage.map((u) => [u.id, u]));
      $('status').textContent = sessions.length + ' session' + (sessions.length === 1 ? '' : 's');
      for (const s of sessions) renderCard(s, byId.get(s.id));
      for (const [id, t] of thumbs) if (!sessions.some((s) => s.id === id)) { t.ws.close(); t.card.remove(); thumbs.delete(id); }
    } catch (e) { $('status').textContent = 'error: ' + e.message; }
  }

  function stopWatching() { if (watching) { watching.ws.close(); watching = null; } }
  function watch(id, takeover) {
    stopWatching();
    $('grid').classList.add('off'); $('detail').classList.add('on');
    $('title').textContent = id; $('msg').textContent = '';
    $('take').hidden = !!takeover; $('release').hidden = !takeover;
    $('view').classList.toggle('taken', !!takeover);
    const params = { fps: '15', format: 'jpeg', quality: '80', ...(takeover ? { takeover: takeover.id } : {}) };
    const ws = openStream(id, params, (b) => show($('view'), b), (m) => {
      if (m.type === 'error') $('msg').textContent = m.error.code + ': ' + m.error.message;
      if (m.type === 'result') $('view').dataset.results = String(Number($('view').dataset.results || 0) + 1);
      if (m.type === 'state' && m.takeover && !takeover) $('msg').textContent = 'taken over by ' + m.takeover.holder;
    });
    watching = { id, ws, takeover };
  }
  const send = (actions) => { if (watching && watching.takeover && watching.ws.readyState === 1) watching.ws.send(JSON.stringify({ id: Date.now(), actions })); };
  const at = (ev) => { const r = $('view').getBoundingClientRect(); const img = $('view');
    return { x: Math.max(0, Math.min(img.naturalWidth - 1, Math.round((ev.clientX - r.left) * img.naturalWidth / r.width))),
             y: Math.max(0, Math.min(img.naturalHeight - 1, Math.round((ev.clientY - r.top) * img.naturalHeight / r.height))) }; };
  const BTN = ['left', 'middle', 'right'];
  $('view').addEventListener('mousedown', (ev) => { ev.preventDefault(); $('view').focus(); const p = at(ev); send([{ type: 'move', ...p }, { type: 'mouse_down', button: BTN[ev.button] || 'left' }]); });
  $('view').addEventListener('mouseup', (ev) => { const p = at(ev); send([{ type: 'mouse_up', button: BTN[ev.button] || 'left', ...p }]); });
  $('view').addEventListener('contextmenu', (ev) => ev.preventDefault());
  let lastMove = 0;
  $('view').addEventListener('mousemove', (ev) => { const now = performance.now(); if (now - lastMove < 30) return; lastMove = now; send([{ type: 'move', ...at(ev) }]); });
  $('view').addEventListener('wheel', (ev) => { ev.preventDefault(); send([{ type: 'scroll', ...at(ev), dx: Math.sign(ev.deltaX), dy: Math.sign(ev.deltaY) }]); }, { passive: false });
  const KEYS = { Enter: 'Return', Backspace: 'BackSpace', Escape: 'Escape', Tab: 'Tab', ArrowLeft: 'Left', ArrowRight: 'Right', ArrowUp: 'Up', ArrowDown: 'Down', Delete: 'Delete', Home: 'Home', End: 'End', PageUp: 'Prior', PageDown: 'Next' };
  $('view').addEventListener('keydown', (ev) => {
    if (!watching || !watching.takeover) return;
    ev.preventDefault();
    const mods = [ev.ctrlKey && 'ctrl', ev.altKey && 'alt', ev.metaKey && 'super'].filter(Boolean);
    if (ev.key.length === 1 && !mods.length) send([{ type: 'type', text: ev.key }]);
    else if (KEYS[ev.key] || ev.key.length === 1) send([{ type: 'key', keys: [...mods, ...(ev.shiftKey && ev.key.length > 1 ? ['shift'] : []), KEYS[ev.key] || ev.key.toLowerCase()] }]);
  });
  $('back').onclick = () => { stopWatching(); $('detail').classList.remove('on'); $('grid').classList.remove('off'); };
  $('take').onclick = async () => {
    try { const t = await api('POST', '/v1/sessions/' + watching.id + '/takeover', { holder: 'dashboard' }); watch(watching.id, t); }
    catch (e) { $('msg').textContent = e.code + ': ' + e.message; }
  };
  $('release').onclick = async () => {
    try { await api('DELETE', '/v1/sessions/' + watching.id + '/takeover', null, { 'x-drums-takeover': watching.takeover.id }); } catch (e) { $('msg').textContent = e.code + ': ' + e.message; }
    watch(watching.id);
  };
  refresh();
  setInterval(refresh, 2000);
})();
</script></body></html>`;

export function uiRoutes(ctx: RouteContext) {
  const app = new Hono();
  app.get('/ui', (c) => {
    const nonce = randomBytes(16).toString('base64');
    return c.html(PAGE(nonce), 200, {
      'content-security-policy': `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'unsafe-inline'; img-src blob:; connect-src 'self' ws://${c.req.header('host')}; base-uri 'none'; frame-ancestors 'none'`,
      'cache-control': 'no-store',
      'referrer-policy': 'no-referrer',
    });
  });
  app.get('/v1/usage', (c) => {
    const list = ctx.mgr.list();
    pruneUsage(new Set(list.map((s) => s.id)));
    const reg = ctx.display.takeovers;
    return c.json({ sessions: list.map((s) => ({ ...sessionUsage(s), takeover: takeoverView(reg.get(s)) })) });
  });
  return app;
}
