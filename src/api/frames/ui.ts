/**
 * The live dashboard at GET /ui (the token as `Authorization`, or, in a browser, the login cookie
 * a one-time code from `drums ui` buys: src/api/ui-login.ts; the page itself never holds a secret). One
 * self-contained page, no external scripts: every session as a live thumbnail (a 2 fps stream)
 * with its state, generation, image, labels, take-over, CPU and memory; click one to watch it
 * at full rate, take it over, drive it with mouse and keyboard, and release it. Recorded episodes
 * (docs/episodes.md) are listed per session or for the whole daemon, filtered by outcome, and replayed
 * on a timeline scrubber: the kept frames in order, each step's mouse actions drawn on the frame, its
 * keys and text as captions, the tree read after it, the generation and outcome.
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
#episodes,#replay{display:none;padding:10px}#episodes.on,#replay.on{display:block}
#eplist{border-collapse:collapse;margin-top:8px}#eplist td,#eplist th{padding:3px 10px;border-bottom:1px solid #333;text-align:left;font-size:13px}
#eplist tr.ep{cursor:pointer}#eplist tr.ep:hover{background:#223}.fail{color:#f77}.ok{color:#7d7}
#frame{max-width:100%;background:#000;outline:1px solid #333;display:block}
#scrubrow{display:flex;gap:8px;align-items:center;margin:8px 0}#scrub{flex:1}
#caption{font:13px ui-monospace,monospace;white-space:pre-wrap;background:#1c1c1c;padding:6px 8px;min-height:1.5em}
#tree{font:11px ui-monospace,monospace;white-space:pre;overflow:auto;max-height:300px;background:#1c1c1c;padding:6px 8px}
</style></head><body>
<header><b>Drums</b><span id="status">connecting…</span><button id="allep">Episodes</button></header>
<div id="grid"></div>
<div id="detail"><div id="bar"><button id="back">← all sessions</button><span id="title"></span>
<button id="take">Take over</button><button id="release" hidden>Release</button><button id="sessep">Episodes</button><span id="msg"></span></div>
<img id="view" tabindex="0" alt="session screen"></div>
<div id="episodes"><div class="bar"><button id="epback">← sessions</button> <b id="eptitle"></b>
 show <select id="outcome"><option value="">all</option><option value="failure">failures</option><option value="success">successes</option><option value="unscored">unscored</option></select>
 <span id="epmsg"></span></div><table id="eplist"></table></div>
<div id="replay"><div class="bar"><button id="rpback">← episodes</button> <span id="rpmeta"></span></div>
<div id="scrubrow"><button id="prev">◀</button><input type="range" id="scrub" min="0" max="0" value="0"><button id="next">▶</button><span id="pos"></span></div>
<canvas id="frame" width="640" height="400"></canvas><div id="caption"></div><pre id="tree" hidden></pre></div>
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

  // ---- Episodes: lists and the replay (docs/episodes.md, docs/dashboard.md).
  let epSession = null;   // the session whose episodes are listed, or null for every episode
  let rp = null;          // {ep, pos, urls, trees}
  const panels = ['grid', 'detail', 'episodes', 'replay'];
  const only = (id) => { for (const p of panels) { $(p).classList.toggle('on', p === id); if (p === 'grid') $(p).classList.toggle('off', id !== 'grid'); } };
  const scoreOf = (e) => !e.outcome ? '' : ((e.outcome.outcome || '') + (e.outcome.reward != null ? ' reward ' + e.outcome.reward : '')).trim();
  const failed = (e) => e.outcome && (e.outcome.outcome != null ? e.outcome.outcome !== 'success' : !(e.outcome.reward > 0));
  async function showEpisodes(session) {
    stopWatching(); epSession = session; only('episodes');
    $('eptitle').textContent = session ? 'episodes of ' + session : 'every episode';
    await loadEpisodes();
  }
  async function loadEpisodes() {
    const o = $('outcome').value;
    $('epmsg').textContent = '';
    try {
      const list = epSession && !o ? (await api('GET', '/v1/sessions/' + epSession + '/episodes')).episodes.slice().reverse()
        : (await api('GET', '/v1/episodes' + (o ? '?outcome=' + o : ''))).episodes.filter((e) => !epSession || e.session === epSession);
      $('eplist').innerHTML = '<tr><th>session</th><th>gen</th><th>state</th><th>steps</th><th>frames</th><th>outcome</th><th>opened</th></tr>' + list.map((e) =>
        '<tr class="ep" data-key="' + esc(e.session + '/' + e.generation) + '" data-outcome="' + esc(e.outcome ? (failed(e) ? 'failure' : 'success') : 'unscored') + '"><td>' + esc(e.session) + '</td><td>' + esc(e.generation) + '</td><td>' +
        esc(e.closedAt ? e.closeReason || 'closed' : 'recording') + (e.stopped ? ' <span class="fail">stopped: ' + esc(e.stopped) + '</span>' : '') + '</td><td>' + esc(e.steps) + '</td><td>' + esc(e.frames) +
        '</td><td class="' + (e.outcome ? (failed(e) ? 'fail' : 'ok') : '') + '">' + esc(scoreOf(e) || '–') + '</td><td>' + esc(new Date(e.openedAt).toLocaleString()) + '</td></tr>').join('');
      for (const tr of document.querySelectorAll('#eplist tr.ep')) tr.onclick = () => { const [id, g] = tr.dataset.key.split('/'); replay(id, Number(g)); };
      if (!list.length) $('epmsg').textContent = 'no episodes' + (o ? ' of this outcome' : '') + ' (only sessions created with record have any)';
    } catch (e) { $('epmsg').textContent = e.code + ': ' + e.message; }
  }
  async function replay(id, generation) {
    only('replay');
    for (const u of rp ? rp.urls.values() : []) URL.revokeObjectURL(u);
    let ep, from = 0, events = [];
    do { ep = await api('GET', '/v1/sessions/' + id + '/episodes/' + generation + '?steps=1&from=' + from); events = events.concat(ep.events); from = ep.next; } while (from != null);
    // Positions on the scrubber: every kept frame, plus each step that has no frame of its own, in the order of the
    // event file (by step), then by time.
    const pos = ep.timeline.map((f) => ({ ...f }));
    for (const st of ep.steps) if (!pos.some((p) => p.step === st.step)) {
      const before = pos.filter((p) => p.at <= st.at).at(-1);
      pos.push({ at: st.at, file: st.frame || (before && before.file) || null, step: st.step });
    }
    pos.sort((a, b) => a.step - b.step || a.at - b.at);
    const screenW = Math.max(0, ...ep.timeline.map((f) => f.width || 0));
    rp = { ep, events, pos, screenW, urls: new Map(), trees: new Map(), t0: ep.events.length ? ep.events[0].at : 0 };
    const e = ep.episode;
    $('rpmeta').innerHTML = '<b>' + esc(e.session) + '</b> generation <b id="rpgen">' + esc(e.generation) + '</b> · ' + esc(e.closedAt ? 'closed (' + (e.closeReason || '') + ')' : 'recording') +
      ' · ' + esc(e.steps) + ' steps · outcome <b id="rpoutcome" class="' + (e.outcome ? (failed(e) ? 'fail' : 'ok') : '') + '">' + esc(scoreOf(e) || 'none') + '</b>' +
      (ep.end.partialBytes || ep.end.badLines.length ? ' · <span class="fail">events end at line ' + esc(ep.end.lines) + ' (a cut or unreadable line skipped)</span>' : '');
    $('scrub').max = String(Math.max(0, pos.length - 1));
    $('scrub').value = '0';
    await showPos(0);
  }
  const fileUrl = async (name) => {
    let u = rp.urls.get(name);
    if (!u) {
      const r = await fetch('/v1/sessions/' + rp.ep.episode.session + '/episodes/' + rp.ep.episode.generation + '/files/' + name);
      if (!r.ok) throw new Error('file ' + name + ': ' + r.status);
      u = URL.createObjectURL(await r.blob()); rp.urls.set(name, u);
    }
    return u;
  };
  const loadImg = (u) => new Promise((res, rej) => { const im = new Image(); im.onload = () => res(im); im.onerror = rej; im.src = u; });
  // Where the pointer was before a step: the last position an earlier step's mouse action left it at.
  function pointerBefore(stepNo) {
    let p = null;
    for (const st of rp.ep.steps.slice(0, stepNo - 1)) for (const a of marksOf(st)) if (a.to) p = a.to;
    return p;
  }
  // A step's mouse actions as marks ({kind, at, path, to}) and its keys and text as captions.
  function marksOf(st) {
    const out = [];
    if (Array.isArray(st.action)) for (const a of st.action) {
      const xy = a.x != null && a.y != null ? { x: a.x, y: a.y } : null;
      if (a.type === 'click') out.push({ kind: a.button === 'right' ? 'rclick' : 'click', at: xy, to: xy, n: a.count || 1 });
      else if (a.type === 'move') out.push({ kind: 'move', at: xy, to: xy });
      else if (a.type === 'mouse_down' || a.type === 'mouse_up') out.push({ kind: a.type, at: xy, to: xy });
      else if (a.type === 'drag') out.push({ kind: 'drag', path: a.path, to: a.path[a.path.length - 1] });
      else if (a.type === 'scroll') out.push({ kind: 'scroll', at: xy, to: xy, dx: a.dx, dy: a.dy });
    } else if (st.source === 'osworld') {
      const code = String((st.agentAction && (st.agentAction.command || st.agentAction.code || st.agentAction.script)) || '');
      const re = /pyautogui\\.(click|doubleClick|rightClick|moveTo|dragTo|mouseDown|mouseUp)\\(\\s*(?:x\\s*=\\s*)?(\\d+)\\s*,\\s*(?:y\\s*=\\s*)?(\\d+)/g;
      for (const m of code.matchAll(re)) {
        const xy = { x: Number(m[2]), y: Number(m[3]) };
        out.push(m[1] === 'dragTo' ? { kind: 'drag', path: [xy], to: xy } : { kind: m[1] === 'rightClick' ? 'rclick' : m[1] === 'moveTo' ? 'move' : 'click', at: xy, to: xy, n: m[1] === 'doubleClick' ? 2 : 1 });
      }
    }
    return out;
  }
  function captionOf(st) {
    if (!Array.isArray(st.action)) {
      const a = st.agentAction || {};
      return (a.path || '') + ' ' + JSON.stringify(a.command || a.code || a.script || a).slice(0, 600);
    }
    return st.action.map((a) => {
      if (a.type === 'type') return 'type ' + JSON.stringify(a.text);
      if (a.type === 'key') return 'key ' + a.keys.join('+');
      if (a.type === 'key_down' || a.type === 'key_up') return a.type + ' ' + a.key;
      if (a.type === 'wait') return 'wait ' + a.ms + ' ms';
      if (a.type === 'done') return 'done: ' + a.status;
      if (a.type === 'drag') return 'drag ' + a.path.map((p) => p.x + ',' + p.y).join(' → ');
      if (a.type === 'scroll') return 'scroll ' + a.dx + ',' + a.dy + (a.x != null ? ' at ' + a.x + ',' + a.y : '');
      return a.type + (a.x != null ? ' ' + a.x + ',' + a.y : '') + (a.button && a.button !== 'left' ? ' ' + a.button : '') + (a.count > 1 ? ' ×' + a.count : '');
    }).join('\\n') + (st.results && st.results.error ? '\\nerror: ' + st.results.error.code + ': ' + st.results.error.message : '');
  }
  function draw(ctx, marks, k, from) {
    ctx.lineWidth = 3;
    for (const m of marks) {
      const P = (p) => [p.x * k, p.y * k];
      ctx.strokeStyle = ctx.fillStyle = m.kind === 'rclick' ? '#ff00ff' : m.kind === 'move' ? '#ffff00' : '#ff0000';
      if (m.kind === 'drag') {
        const pts = (m.path.length === 1 && from ? [from] : []).concat(m.path).map(P);
        ctx.beginPath(); pts.forEach(([x, y], i) => (i ? ctx.lineTo(x, y) : ctx.moveTo(x, y))); ctx.stroke();
        const [x, y] = pts[pts.length - 1]; ctx.beginPath(); ctx.arc(x, y, 6, 0, 7); ctx.fill();
      } else if (m.at) {
        const [x, y] = P(m.at);
        ctx.beginPath(); ctx.arc(x, y, m.kind === 'move' ? 8 : 14, 0, 7); ctx.stroke();
        if (m.kind !== 'move') { ctx.beginPath(); ctx.arc(x, y, 4, 0, 7); ctx.fill(); }
        if (m.n > 1) ctx.fillText('×' + m.n, x + 16, y - 8);
        if (m.kind === 'scroll') { ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x + 20 * Math.sign(m.dx || 0), y + 20 * Math.sign(m.dy || 0)); ctx.stroke(); }
      }
      if (m.to) from = m.to;
    }
  }
  async function showPos(i) {
    if (!rp) return;
    const p = rp.pos[i];
    const cv = $('frame'), ctx = cv.getContext('2d');
    const st = p && p.step ? rp.ep.steps[p.step - 1] : null;
    $('pos').textContent = p ? (i + 1) + '/' + rp.pos.length + ' · step ' + (p.step || 0) + '/' + rp.ep.steps.length + ' · +' + ((p.at - rp.t0) / 1000).toFixed(2) + ' s' : 'nothing recorded';
    cv.dataset.step = String(p ? p.step : 0); cv.dataset.file = (p && p.file) || '';
    if (p && p.file) {
      const im = await loadImg(await fileUrl(p.file));
      if ($('scrub').value !== String(i)) return; // the scrubber moved on meanwhile
      cv.width = im.naturalWidth; cv.height = im.naturalHeight; ctx.drawImage(im, 0, 0);
    } else { ctx.fillStyle = '#000'; ctx.fillRect(0, 0, cv.width, cv.height); }
    const marks = st ? marksOf(st) : [];
    if (st) draw(ctx, marks, rp.screenW ? cv.width / rp.screenW : 1, pointerBefore(st.step));
    cv.dataset.marks = marks.map((m) => m.kind + (m.at ? '@' + m.at.x + ',' + m.at.y : m.to ? '@' + m.to.x + ',' + m.to.y : '')).join(' ');
    $('caption').textContent = st ? 'step ' + st.step + ' (' + st.source + ')\\n' + captionOf(st) : 'before the first step';
    const tree = st && st.tree;
    $('tree').hidden = !tree;
    if (tree) {
      let t = rp.trees.get(tree);
      if (t == null) { const r = await fetch('/v1/sessions/' + rp.ep.episode.session + '/episodes/' + rp.ep.episode.generation + '/files/' + tree); t = r.ok ? (await r.text()).slice(0, 200000) : 'tree: ' + r.status; rp.trees.set(tree, t); }
      $('tree').textContent = t;
    }
  }
  $('scrub').addEventListener('input', () => showPos(Number($('scrub').value)));
  const stepBy = (d) => { const v = Math.max(0, Math.min(Number($('scrub').max), Number($('scrub').value) + d)); $('scrub').value = String(v); showPos(v); };
  $('prev').onclick = () => stepBy(-1);
  $('next').onclick = () => stepBy(1);
  $('outcome').onchange = loadEpisodes;
  $('allep').onclick = () => showEpisodes(null);
  $('sessep').onclick = () => showEpisodes(watching ? watching.id : null);
  $('epback').onclick = () => only('grid');
  $('rpback').onclick = () => showEpisodes(epSession);
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
