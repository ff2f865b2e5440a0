// Weir's web UI: one page over the JSON API (/api/v1/...), polled every
// two seconds. No framework; the graph layout is dagre's.
import { graphlib, layout } from '@dagrejs/dagre';
import { initProfile } from './profile.js';
import { startWorkers } from './workers.js';

const POLL_MS = 2000;
const SVGNS = 'http://www.w3.org/2000/svg';

const $ = (id) => document.getElementById(id);

async function api(path) {
  const r = await fetch('api/v1/' + path);
  if (!r.ok) throw new Error(`GET /api/v1/${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

// h builds an HTML element: h('td', {class: 'num'}, 'text', child...).
function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

// s builds an SVG element.
function s(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs);
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
}

const esc = (v) => String(v).replace(/[&<>"]/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[ch]);

// tag writes one element's markup.
function tag(name, attrs, text) {
  const as = Object.entries(attrs).map(([k, v]) => ` ${k}="${esc(v)}"`).join('');
  return text === undefined ? `<${name}${as}/>` : `<${name}${as}>${esc(text)}</${name}>`;
}

function fmtSeconds(x) {
  if (x === undefined || x === null) return '';
  if (x === 0) return '0';
  if (x < 0.001) return `${(x * 1e6).toFixed(0)} µs`;
  if (x < 1) return `${(x * 1000).toFixed(x < 0.01 ? 1 : 0)} ms`;
  if (x < 120) return `${x.toFixed(2)} s`;
  if (x < 7200) return `${(x / 60).toFixed(1)} min`;
  return `${(x / 3600).toFixed(1)} h`;
}

function fmtBytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  const i = Math.min(Math.floor(Math.log(n) / Math.log(1024)), u.length - 1);
  return `${(n / 1024 ** i).toFixed(i ? 1 : 0)} ${u[i]}`;
}

function fmtCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} G`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)} k`;
  return `${Math.round(n)}`;
}

const pct = (x) => `${Math.round((x || 0) * 100)}%`;

// Back-pressure levels as Flink names them: ok below 10%, low to 50%, high.
function pressureLevel(ratio) {
  if (ratio > 0.5) return 'high';
  if (ratio > 0.1) return 'low';
  return 'ok';
}
const pressureColour = { ok: '#cdebd6', low: '#f7e3a1', high: '#f3b8b3' };

const ui = {
  graph: null, // the job graph, fetched once
  config: null,
  answeredAt: 0, // when the API last answered (browser clock)
  subtasks: [],
  checkpoints: [],
  selectedVertex: null,
  // selectedCheckpoint: the id whose timeline shows; follow: pick the
  // newest completed one until the user picks one.
  selectedCheckpoint: null,
  follow: true,
  timelineVertex: '',
};

// ---- overview ----

function renderOverview(job, cps) {
  $('job-name').textContent = job.name;
  const badge = $('job-state');
  badge.textContent = job.state;
  badge.className = `badge ${job.state}`;
  const sources = new Set(ui.graph.vertices.filter((v) => !ui.graph.edges.some((e) => e.to === v.id)).map((v) => v.id));
  const rate = ui.subtasks.filter((t) => sources.has(t.vertex)).reduce((a, t) => a + t.recordsInPerSecond, 0);
  const completed = cps.filter((c) => c.status === 'completed');
  const last = completed[completed.length - 1];
  // Times are the server's: a browser's clock may be off.
  const now = Date.parse(job.now);
  const until = job.ended ? Date.parse(job.ended) : now;
  const uptime = (until - Date.parse(job.started)) / 1000;
  const cards = [
    ['State', job.state],
    ['Uptime', fmtSeconds(uptime)],
    ['Attempt', job.attempt],
    ['Restarts', job.restarts],
    ['Last checkpoint', last ? `${fmtSeconds((now - Date.parse(last.at)) / 1000)} ago` : 'none yet'],
    ['Its duration', last ? fmtSeconds(last.durationSeconds) : ''],
    ['Records read / s', fmtCount(rate)],
    ['Checkpoints (last 100)', `${completed.length} ok, ${cps.length - completed.length} aborted`],
    ['Alignment', configuredAlignment(ui.config)],
    ['Restored', restoredFrom(job.lastRestore)],
  ];
  if (job.ended) {
    cards.unshift(['Ended', `${fmtSeconds((now - until) / 1000)} ago` + (job.stoppedWith ? `, with savepoint ${job.stoppedWith}` : '')]);
  }
  $('ended').replaceChildren(...(job.ended ? [h('div', { class: `banner ${job.state}`, 'data-state': job.state },
    `The job ${job.state === 'stopped' ? 'stopped with a savepoint' : job.state}` + (job.cause ? `: ${job.cause.split('\n')[0]}` : '.') +
    ' This page shows its final state while the process lingers.')] : []));
  $('overview').replaceChildren(...cards.map(([label, value]) =>
    h('div', { class: 'card', 'data-card': label }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, String(value)))));
}

// restoredFrom says what the current attempt restored: which checkpoint or
// savepoint, and the parallelism it had and has now.
function restoredFrom(r) {
  if (!r) return 'nothing (from the beginning)';
  const scale = r.fromParallelism && r.fromParallelism !== r.parallelism ? `, parallelism ${r.fromParallelism} → ${r.parallelism}` : '';
  return `${r.savepoint ? 'savepoint' : 'checkpoint'} ${r.checkpoint} in attempt ${r.attempt}${scale}`;
}

// configuredAlignment says how the job's checkpoints treat barriers, from
// /api/v1/config.
function configuredAlignment(cfg) {
  if (!cfg || !cfg.checkpointAlignment) return '—';
  if (cfg.mode !== 'exactly-once') return `none (${cfg.mode})`;
  if (cfg.checkpointAlignment === 'aligned' && cfg.alignedCheckpointTimeoutNanos > 0) {
    return `aligned, unaligned after ${fmtSeconds(cfg.alignedCheckpointTimeoutNanos / 1e9)}`;
  }
  return cfg.checkpointAlignment;
}

// checkpointAlignment says how a completed checkpoint's tasks
// snapshotted: "aligned", "unaligned 3/4" or "switched 1/4" (tasks).
function checkpointAlignment(c) {
  if (c.status !== 'completed' || !c.alignment) return '';
  if (!c.unalignedTasks) return 'aligned';
  const of = c.acknowledgedTasks;
  if (!c.switchedTasks) return `unaligned ${c.unalignedTasks}/${of}`;
  if (c.switchedTasks === c.unalignedTasks) return `switched ${c.switchedTasks}/${of}`;
  return `unaligned ${c.unalignedTasks}/${of}, ${c.switchedTasks} switched`;
}

// ---- job graph ----

function vertexLabel(v) {
  return v.operators.map((o) => o.name || o.uid).join(' → ');
}

// vertexDetail shows the most busy and the most back-pressured subtask's
// share, as Flink's graph: a mean would hide one busy subtask among idle
// siblings.
const vertexDetail = (v, busy, bp) => `parallelism ${v.parallelism} · busy max ${pct(busy)} · back-pressured max ${pct(bp)}`;

// vertexLoad is how a vertex fares over the last second, from its busiest
// and most back-pressured subtasks: a bottleneck (busy, not back-pressured
// itself, with a back-pressured vertex upstream: the cause), busy,
// back-pressured (a victim of something downstream), or ok.
function vertexLoad(v, byVertex) {
  const stats = (id) => {
    const subs = byVertex.get(id) || [];
    return { busy: Math.max(0, ...subs.map((t) => t.busyRatio)), bp: Math.max(0, ...subs.map((t) => t.backPressuredRatio)) };
  };
  const { busy, bp } = stats(v.id);
  const pressedUpstream = ui.graph.edges.some((e) => e.to === v.id && stats(e.from).bp > 0.5);
  let load = 'ok';
  if (busy > 0.5 && bp <= 0.1 && pressedUpstream) load = 'bottleneck';
  else if (bp > 0.1) load = 'backpressured';
  else if (busy > 0.5) load = 'busy';
  return { busy, bp, load };
}
const loadColour = { ok: '#cdebd6', busy: '#f3b8b3', backpressured: '#f7e3a1', bottleneck: '#e0685d' };

// layoutGraph places the vertices once; the graph does not change while
// the job runs.
function layoutGraph() {
  const g = new graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 30, ranksep: 70, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const v of ui.graph.vertices) {
    const width = 7 * Math.max(vertexLabel(v).length + 16, vertexDetail(v, 1, 1).length) + 24;
    g.setNode(v.id, { width, height: 54 });
  }
  ui.graph.edges.forEach((e, i) => g.setEdge(e.from, e.to, { label: e.partition, width: 60, height: 14 }, `e${i}`));
  layout(g);
  return g;
}

function renderGraph() {
  if (!ui.layout) ui.layout = layoutGraph();
  const g = ui.layout;
  const byVertex = groupBy(ui.subtasks, (t) => t.vertex);
  const { width, height } = g.graph();
  const root = s('svg', { viewBox: `0 0 ${width} ${height}`, height: Math.max(height, 80), 'data-vertices': ui.graph.vertices.length });
  root.append(s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#69737e' }))));
  ui.graph.edges.forEach((e, i) => {
    const ed = g.edge({ v: e.from, w: e.to, name: `e${i}` });
    const d = ed.points.map((p, j) => `${j ? 'L' : 'M'}${p.x},${p.y}`).join(' ');
    root.append(s('g', { class: 'edge' }, s('path', { d, 'marker-end': 'url(#arrow)' }),
      s('text', { x: ed.x, y: ed.y, 'text-anchor': 'middle' }, e.partition + (e.port ? ` (side ${e.port})` : ''))));
  });
  for (const v of ui.graph.vertices) {
    const n = g.node(v.id);
    const { busy, bp, load } = vertexLoad(v, byVertex);
    const x = n.x - n.width / 2;
    const y = n.y - n.height / 2;
    const title = `${v.id}: ${v.operators.map((o) => `${o.name || o.uid} (${o.kind})`).join(', ')}` +
      (load === 'bottleneck' ? '\nThe bottleneck: busy, not back-pressured, and what feeds it is back-pressured.' : '');
    root.append(s('g', {
      class: `vertex ${load}${ui.selectedVertex === v.id ? ' selected' : ''}`, 'data-id': v.id, 'data-backpressure': pressureLevel(bp),
      'data-load': load, 'data-bottleneck': String(load === 'bottleneck'),
    },
    s('title', {}, title),
    s('rect', { x, y, width: n.width, height: n.height, fill: loadColour[load] }),
    s('text', { x: n.x, y: y + 20, 'text-anchor': 'middle', 'font-weight': 600 }, (load === 'bottleneck' ? '⚠ bottleneck: ' : '') + vertexLabel(v)),
    s('text', { x: n.x, y: y + 40, 'text-anchor': 'middle' }, vertexDetail(v, busy, bp))));
  }
  $('graph').replaceChildren(root);
}

function renderVertex() {
  const v = ui.graph.vertices.find((x) => x.id === ui.selectedVertex);
  if (!v) {
    $('vertex').replaceChildren();
    return;
  }
  const cols = ['Subtask', 'State', 'Attempt', 'Records in', 'Records out', 'In / s', 'Out / s', 'Busy', 'Idle', 'Back-pressured', 'Sink commit', 'Watermark', 'Bytes in', 'Bytes out'];
  const rows = ui.subtasks.filter((t) => t.vertex === v.id).map((t) => h('tr', { 'data-task': t.task },
    h('td', {}, t.task), h('td', { class: t.state === 'failed' ? 'error' : '' }, t.state), h('td', { class: 'num' }, t.attempt),
    h('td', { class: 'num' }, fmtCount(t.recordsIn)), h('td', { class: 'num' }, fmtCount(t.recordsOut)),
    h('td', { class: 'num' }, fmtCount(t.recordsInPerSecond)), h('td', { class: 'num' }, fmtCount(t.recordsOutPerSecond)),
    h('td', { class: 'num' }, pct(t.busyRatio)), h('td', { class: 'num' }, pct(t.idleRatio)),
    h('td', { class: 'num', style: `background:${pressureColour[pressureLevel(t.backPressuredRatio)]}` }, pct(t.backPressuredRatio)),
    h('td', { class: 'num', title: t.sinkCommits ? `${t.sinkCommits} commits, ${fmtSeconds(t.sinkCommitSeconds)} in all` : '' },
      t.sinkCommits ? fmtSeconds(t.sinkCommitLatencySeconds || t.sinkCommitSeconds / t.sinkCommits) : '—'),
    h('td', {}, t.watermark === undefined ? '—' : new Date(t.watermark).toISOString()),
    ...subtaskBytes(t)));
  $('vertex').replaceChildren(
    h('h3', {}, `${vertexLabel(v)} — ${v.parallelism} subtasks (max parallelism ${v.maxParallelism})`),
    h('div', { class: 'scroll' }, h('table', { id: 'subtasks' },
      h('thead', {}, h('tr', {}, ...cols.map((c, i) => h('th', { class: i > 2 && i !== 11 ? 'num' : '', title: i > 11 ? BYTES_TITLE : '' }, c)))),
      h('tbody', {}, ...rows))));
}

const BYTES_TITLE = 'sent over the network to and from other processes (frames, headers included); channels within a process pass batches by reference and count 0';

// subtaskBytes are the cells of a subtask's bytes in and out.
function subtaskBytes(t) {
  return [t.bytesIn, t.bytesOut].map((n, i) =>
    h('td', { class: 'num', 'data-bytes': i ? 'out' : 'in', 'data-value': n || 0, title: BYTES_TITLE }, fmtBytes(n || 0)));
}

function groupBy(xs, key) {
  const m = new Map();
  for (const x of xs) {
    const k = key(x);
    if (!m.has(k)) m.set(k, []);
    m.get(k).push(x);
  }
  return m;
}

// ---- checkpoints ----

function renderCheckpoints(cps) {
  const cols = ['ID', 'Kind', 'Status', 'Attempt', 'Triggered', 'At', 'Duration', 'Size', 'Uploaded', 'Acks', 'Alignment', 'Channel state', 'Longest sync part', 'Held by', 'Reason'];
  const rows = [...inflightRows(), ...cps.slice().reverse().map((c) => h('tr', {
    'data-id': c.id, 'data-status': c.status,
    class: (c.status === 'completed' ? 'clickable' : '') + (c.id === ui.selectedCheckpoint ? ' selected' : ''),
  },
  h('td', { class: 'num' }, c.id), h('td', {}, c.savepoint ? 'savepoint' : 'checkpoint'),
  h('td', { class: c.status === 'completed' ? '' : 'error' }, c.status), h('td', { class: 'num' }, c.attempt),
  h('td', {}, c.triggered ? new Date(c.triggered).toLocaleTimeString() : ''),
  h('td', {}, new Date(c.at).toLocaleTimeString()), h('td', { class: 'num' }, fmtSeconds(c.durationSeconds)),
  h('td', { class: 'num' }, c.status === 'completed' ? fmtBytes(c.sizeBytes) : ''),
  h('td', { class: 'num' }, c.status === 'completed' ? fmtBytes(c.uploadedBytes) : ''),
  h('td', { class: 'num' }, c.acknowledgedTasks || ''),
  h('td', { class: `alignment ${c.alignment || ''}`, title: c.switchedTasks ? 'tasks switched to unaligned by the aligned-checkpoint timeout' : '' }, checkpointAlignment(c)),
  h('td', { class: 'num' }, c.status === 'completed' && c.alignment ? fmtBytes(c.channelStateBytes) : ''),
  h('td', { class: 'num' }, fmtSeconds(c.syncSeconds)),
  h('td', { class: 'held-by', title: c.slowestTask ? `the barrier waited ${fmtSeconds(c.heldSeconds)} in this subtask's input, behind its backlog; the last to acknowledge was ${c.slowestTask}` : '' },
    c.heldBy ? `${c.heldBy} (${fmtSeconds(c.heldSeconds)})` : ''),
  h('td', {}, c.reason || '')))];
  $('checkpoints').replaceChildren(
    h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', {}, c)))),
    h('tbody', {}, ...rows));
  renderChart($('chart-duration'), cps, (c) => c.durationSeconds, fmtSeconds);
  renderChart($('chart-size'), cps, (c) => c.sizeBytes, fmtBytes);
}

// renderSummary shows the spread of the completed checkpoints, as Flink's
// checkpoint summary.
function renderSummary(sum) {
  const rows = [['Duration', sum.durationSeconds, fmtSeconds], ['Size', sum.sizeBytes, fmtBytes],
    ['Longest alignment', sum.alignSeconds, fmtSeconds], ['Longest sync part', sum.syncSeconds, fmtSeconds]];
  $('checkpoint-summary').replaceChildren(
    h('thead', {}, h('tr', {}, h('th', {}, `${sum.completed} completed, ${sum.aborted} aborted`), ...['min', 'mean', 'p99', 'max'].map((c) => h('th', { class: 'num' }, c)))),
    h('tbody', {}, ...rows.map(([name, sp, fmt]) => h('tr', { 'data-quantity': name }, h('th', {}, name),
      ...[sp.min, sp.mean, sp.p99, sp.max].map((x) => h('td', { class: 'num' }, sum.completed ? fmt(x) : '—'))))));
}

// renderChart draws one bar per checkpoint, oldest left; aborted ones as
// short red bars.
function renderChart(into, cps, value, fmt) {
  const W = 480, H = 130, L = 60, B = 16;
  const max = Math.max(1e-9, ...cps.filter((c) => c.status === 'completed').map(value));
  const bw = (W - L) / Math.max(cps.length, 1);
  const root = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, width: '100%', height: H });
  root.append(s('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }), s('line', { class: 'axis', x1: L, y1: 4, x2: L, y2: H - B }),
    s('text', { x: L - 4, y: 12, 'text-anchor': 'end' }, fmt(max)), s('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'));
  cps.forEach((c, i) => {
    const ok = c.status === 'completed';
    const hgt = ok ? Math.max(1, (value(c) / max) * (H - B - 8)) : 6;
    root.append(s('rect', { class: `bar${ok ? (c.savepoint ? ' savepoint' : '') : ' aborted'}`, x: L + i * bw + 1, y: H - B - hgt, width: Math.max(1, bw - 2), height: hgt },
      s('title', {}, `${c.savepoint ? 'savepoint' : 'checkpoint'} ${c.id}: ${ok ? fmt(value(c)) : c.status}`)));
  });
  if (cps.length) {
    root.append(s('text', { x: L, y: H - 3 }, `#${cps[0].id}`), s('text', { x: W, y: H - 3, 'text-anchor': 'end' }, `#${cps[cps.length - 1].id}`));
  }
  into.replaceChildren(root);
}

// ---- checkpoints in progress ----

// ui.inflight holds the checkpoints in progress, newest first, each with
// its tasks' progress (/api/v1/checkpoints/{id}).
ui.inflight = [];

// loadInflight takes the checkpoints in progress out of cps (the list
// /api/v1/checkpoints answered: they come first), leaving the history, and
// loads each one's tasks into ui.inflight.
async function loadInflight(cps) {
  const n = cps.findIndex((c) => c.status !== 'in_progress');
  const inflight = cps.splice(0, n < 0 ? cps.length : n);
  // One that completed in between answers as such; it shows in the history
  // at the next poll.
  ui.inflight = (await Promise.all(inflight.map((c) => api(`checkpoints/${c.id}`).catch(() => null))))
    .filter((c) => c && c.status === 'in_progress');
}

// inflightRows are the rows of the checkpoint table for the checkpoints in
// progress: their age so far and the tasks that acknowledged.
function inflightRows() {
  return ui.inflight.map((c) => h('tr', { 'data-id': c.id, 'data-status': c.status, class: 'inflight' },
    h('td', { class: 'num' }, c.id), h('td', {}, c.savepoint ? 'savepoint' : 'checkpoint'),
    h('td', { class: 'in-progress' }, 'in progress'), h('td', { class: 'num' }, c.attempt),
    h('td', {}, new Date(c.triggered).toLocaleTimeString()), h('td', {}, ''),
    h('td', { class: 'num age', title: 'so far' }, fmtSeconds(c.ageSeconds || 0)), h('td', {}, ''), h('td', {}, ''),
    h('td', { class: 'num acks' }, `${c.acknowledgedTasks || 0}/${c.totalTasks}`),
    h('td', {}, ''), h('td', {}, ''), h('td', {}, ''), h('td', {}, ''), h('td', {}, '')));
}

// inflightTask says where one task is in a checkpoint in progress.
function inflightTask(t) {
  switch (t.state) {
    case 'acknowledged': return `acknowledged after ${fmtSeconds(t.ackedSeconds || 0)}`;
    case 'aligning': return `aligning for ${fmtSeconds(t.alignSeconds || 0)}, ${t.barriersReceived} of ${t.inputChannels} barriers` +
      (t.alignment && t.alignment !== 'aligned' ? ` (${t.alignment})` : '');
    case 'snapshotting': return 'snapshotting: writing its state';
    default: return t.state === 'waiting' ? 'waiting: no barrier yet' : t.state;
  }
}

// renderInflight shows each checkpoint in progress with where each task
// is: acknowledged, snapshotting, aligning (since when, barriers received
// of its channels) or waiting for its first barrier.
function renderInflight() {
  const order = { waiting: 0, aligning: 1, snapshotting: 2, acknowledged: 3 };
  $('inflight').replaceChildren(...(ui.inflight.length ? ui.inflight.map((c) => h('div', { class: 'inflight-cp', 'data-id': c.id },
    h('h3', {}, `${c.savepoint ? 'Savepoint' : 'Checkpoint'} ${c.id}: in progress for ${fmtSeconds(c.ageSeconds || 0)}, ` +
      `${c.acknowledgedTasks || 0} of ${c.totalTasks} tasks acknowledged`),
    h('div', { class: 'tasks' }, ...(c.progress || []).slice().sort((a, b) => order[a.state] - order[b.state] || a.task.localeCompare(b.task))
      .map((t) => h('span', { class: `task ${t.state}`, 'data-task': t.task, 'data-state': t.state, title: t.alignSince ? `first barrier at ${new Date(t.alignSince).toLocaleTimeString()}` : '' },
        h('b', {}, t.task), ' ', inflightTask(t))))))
    : [h('p', { class: 'muted' }, 'No checkpoint in progress.')]));
}

// ---- the alignment timeline ----

async function loadTimeline() {
  if (ui.selectedCheckpoint === null) return;
  try {
    ui.timeline = await api(`checkpoints/${ui.selectedCheckpoint}`);
  } catch (err) {
    ui.timeline = null;
    $('timeline').replaceChildren(h('p', { class: 'error' }, String(err)));
    return;
  }
  renderTimeline();
}

function renderTimeline() {
  const c = ui.timeline;
  if (!c) return;
  const how = checkpointAlignment(c);
  $('timeline-title').textContent = `— ${c.savepoint ? 'savepoint' : 'checkpoint'} ${c.id}, ${fmtSeconds(c.durationSeconds)}, ${(c.tasks || []).length} subtasks` +
    (how && how !== 'aligned' ? `, ${how}, ${fmtBytes(c.channelStateBytes)} of channel state` : '') +
    (c.heldBy ? `; held by ${c.heldBy} for ${fmtSeconds(c.heldSeconds)}` : '') +
    (c.finalizeSeconds !== undefined ? `; metadata written ${fmtSeconds(c.finalizeSeconds)} after the last acknowledgement` : '');
  const order = new Map(ui.graph.vertices.map((v, i) => [v.id, i]));
  const select = $('timeline-vertex');
  const options = [h('option', { value: '' }, 'all vertices'), ...ui.graph.vertices.map((v) => h('option', { value: v.id }, vertexLabel(v)))];
  select.replaceChildren(...options);
  select.value = ui.timelineVertex;
  const blocks = !ui.config || ui.config.mode === 'exactly-once'; // at least once does not block channels
  const tasks = (c.tasks || [])
    .map((t) => ({ ...t, vertex: t.task.slice(0, t.task.lastIndexOf('#')), subtask: Number(t.task.slice(t.task.lastIndexOf('#') + 1)) }))
    .filter((t) => !ui.timelineVertex || t.vertex === ui.timelineVertex)
    .sort((a, b) => (order.get(a.vertex) - order.get(b.vertex)) || (a.subtask - b.subtask));
  const box = $('timeline');
  if (!tasks.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'No subtask of this vertex took part.'));
    return;
  }
  const end = Math.max(c.durationSeconds || 0, ...tasks.map((t) => t.ackedSeconds), 1e-6);
  // Room on the right for the rows' labels: how a task's snapshot went
  // when not aligned, and its channel state.
  const labelled = tasks.some((t) => (t.alignment && t.alignment !== 'aligned') || t.channelStateBytes > 0);
  const W = Math.max(800, box.clientWidth - 20), L = 150, R = labelled ? 200 : 10;
  const x = (sec) => L + (Math.max(0, sec) / end) * (W - L - R);
  // A row: the task's bar, then a line per input channel it blocked for
  // 1% of the checkpoint or more (up to 4), labelled.
  const timesOf = (t) => {
    const syncStart = Math.max(0, t.ackedSeconds - t.asyncSeconds - t.syncSeconds);
    return { syncStart, first: Math.max(0, syncStart - t.alignSeconds) };
  };
  const blockedOf = (t) => {
    const { syncStart, first } = timesOf(t);
    if (!blocks) return [];
    return (t.barrierArrivalsSeconds || []).map((a, i) => ({ i, at: first + a, a }))
      .filter((b) => b.a >= 0 && syncStart - b.at >= end / 100).slice(0, 4);
  };
  const offsets = [];
  let total = 0;
  for (const t of tasks) {
    offsets.push(total);
    total += 16 + 11 * blockedOf(t).length;
  }
  const rowMarkup = (t, y) => {
    const acked = t.ackedSeconds;
    const { syncStart, first } = timesOf(t);
    const arrivals = t.barrierArrivalsSeconds || [];
    const channels = t.channels || [];
    const how = t.alignment || 'aligned';
    const out = [`<g class="tl-row tl-${esc(how)}" data-task="${esc(t.task)}" data-alignment="${esc(how)}" data-channel-state="${esc(t.channelStateBytes || 0)}">`,
      tag('text', { x: L - 6, y: y + 10, 'text-anchor': 'end' }, t.task),
      tag('rect', { class: 'tl-wait', x: x(0), y: y + 5, width: Math.max(0, x(first) - x(0)), height: 2 }),
      tag('rect', { class: 'tl-align', x: x(first), y: y + 2, width: Math.max(0, x(syncStart) - x(first)), height: 8 }),
      tag('rect', { class: 'tl-sync', x: x(syncStart), y: y + 2, width: Math.max(1, x(syncStart + t.syncSeconds) - x(syncStart)), height: 8 }),
      tag('rect', { class: 'tl-async', x: x(syncStart + t.syncSeconds), y: y + 2, width: Math.max(1, x(acked) - x(syncStart + t.syncSeconds)), height: 8 })];
    // Not aligned: a mark where the snapshot went unaligned (a switched
    // one after aligning for alignSeconds), and a label after the bar.
    if (how !== 'aligned') {
      out.push(tag('line', { class: 'tl-switch', x1: x(syncStart), y1: y - 1, x2: x(syncStart), y2: y + 13 }));
    }
    if (how !== 'aligned' || t.channelStateBytes > 0) {
      const what = how === 'switched' ? `switched after ${fmtSeconds(t.alignSeconds)}` : how;
      out.push(tag('text', { class: `tl-how ${how}`, x: x(acked) + 4, y: y + 10 }, `${what} · ${fmtBytes(t.channelStateBytes)}`));
    }
    // Ticks at the first and the last barrier (a task may read hundreds
    // of channels; the hover lists them all).
    const came = arrivals.filter((a) => a >= 0);
    for (const a of came.length ? [Math.min(...came), Math.max(...came)] : []) {
      out.push(tag('line', { class: 'tl-tick', x1: x(first + a), y1: y, x2: x(first + a), y2: y + 12 }));
    }
    blockedOf(t).forEach(({ i, at }, k) => {
      const ly = y + 21 + 11 * k;
      const label = `${channels[i] || `channel ${i}`} blocked ${fmtSeconds(syncStart - at)}`;
      out.push(tag('rect', { class: 'tl-blocked', 'data-channel': channels[i] || i, x: x(at), y: ly, width: x(syncStart) - x(at), height: 2 }),
        tag('text', { class: 'tl-label', x: x(syncStart) - x(at) > 6 * label.length ? x(at) + 3 : x(syncStart) + 3, y: ly - 1 }, label));
    });
    out.push('</g>');
    return out.join('');
  };
  // The axis, then the rows in a scrolling box that draws only the rows
  // in view (and a screen's worth around them): a thousand subtasks would
  // make tens of thousands of elements.
  const ticks = [0, 1, 2, 3, 4].map((i) => (end * i) / 4);
  const axis = s('svg', { width: W, height: 16 });
  axis.innerHTML = ticks.map((sec, i) => tag('text', { x: x(sec), y: 12, 'text-anchor': i === 4 ? 'end' : 'middle' }, fmtSeconds(sec))).join('');
  const rows = h('div', { class: 'tl-rows', style: `height:${total}px` });
  const scroller = h('div', { class: 'tl-scroll' }, rows);
  let drawnFrom = -1, drawnTo = -1;
  const draw = () => {
    const top = scroller.scrollTop, view = scroller.clientHeight || 600;
    const from = Math.max(0, top - view), to = Math.min(total, top + 2 * view);
    if (from >= drawnFrom && to <= drawnTo && drawnFrom >= 0) return;
    let lo = 0, hi = tasks.length; // the first row ending after from
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (offsets[mid] + 16 < from) lo = mid + 1; else hi = mid;
    }
    const out = ticks.map((sec) => tag('line', { class: 'tl-grid', x1: x(sec), y1: from, x2: x(sec), y2: to }));
    for (let i = lo; i < tasks.length && offsets[i] < to; i++) out.push(rowMarkup(tasks[i], offsets[i]));
    const svg = s('svg', { width: W, height: to - from, viewBox: `0 ${from} ${W} ${to - from}`, style: `position:absolute;left:0;top:${from}px` });
    svg.innerHTML = out.join('');
    rows.replaceChildren(svg);
    drawnFrom = from;
    drawnTo = to;
  };
  let pending = false;
  scroller.addEventListener('scroll', () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  });
  // The hover text, a line per channel, is built when a row is first
  // hovered.
  const byTask = new Map(tasks.map((t) => [t.task, t]));
  scroller.addEventListener('mouseover', (e) => {
    const g = e.target.closest('.tl-row');
    if (!g || g.querySelector('title')) return;
    const t = byTask.get(g.dataset.task);
    const { syncStart, first } = timesOf(t);
    const channels = t.channels || [];
    const how = {
      unaligned: 'unaligned from its first barrier',
      switched: `aligned ${fmtSeconds(t.alignSeconds)}, then the aligned-checkpoint timeout switched it to unaligned`,
    }[t.alignment] || 'aligned';
    g.prepend(s('title', {}, [`${t.task}: first barrier at ${fmtSeconds(first)}, acknowledged at ${fmtSeconds(t.ackedSeconds)}, ` +
      `aligned ${fmtSeconds(t.alignSeconds)}, sync ${fmtSeconds(t.syncSeconds)}, async ${fmtSeconds(t.asyncSeconds)}, ${fmtBytes(t.bytes)}`,
    `${how}; channel state ${fmtBytes(t.channelStateBytes)}`,
    ...(t.barrierArrivalsSeconds || []).map((a, i) => {
      const name = channels[i] || `channel ${i}`;
      if (a < 0) return `${name}: no barrier before the snapshot`;
      return `${name}: barrier +${fmtSeconds(a)}, blocked ${fmtSeconds(blocks ? Math.max(0, syncStart - (first + a)) : 0)}`;
    })].join('\n')));
  });
  box.replaceChildren(axis, scroller);
  draw();
}

// ---- failures ----

function renderFailures(fs) {
  const cols = ['At', 'Attempt', 'Restored checkpoint', 'Restart delay', 'Cause'];
  $('failures').replaceChildren(
    h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', {}, c)))),
    h('tbody', {}, ...(fs.length ? fs.slice().reverse().map((f) => h('tr', {},
      h('td', {}, new Date(f.at).toLocaleString()), h('td', { class: 'num' }, f.attempt),
      h('td', { class: 'num' }, f.restoresCheckpoint || 'none (from the beginning)'), h('td', { class: 'num' }, fmtSeconds(f.delaySeconds)),
      h('td', {}, cause(f.cause)))) : [h('tr', {}, h('td', { colspan: cols.length, class: 'muted' }, 'No failures.'))])));
}

// cause shows a failure's first line, and the rest (a stack, say) folded.
function cause(text) {
  const [first, ...rest] = (text || '').split('\n');
  if (!rest.length) return first;
  return h('details', {}, h('summary', {}, first), h('pre', {}, rest.join('\n')));
}

// renderConfig lists the job's settings: durations (…Nanos) in seconds.
function renderConfig(cfg) {
  const rows = Object.entries(cfg || {}).map(([key, value]) => {
    let name = key;
    if (key.endsWith('Nanos') && typeof value === 'number') {
      name = key.slice(0, -'Nanos'.length);
      value = value ? fmtSeconds(value / 1e9) : '0 (off)';
    }
    return h('tr', { 'data-setting': name }, h('th', {}, name), h('td', {}, String(value)));
  });
  $('config').replaceChildren(...rows);
}

// ---- polling ----

async function refresh() {
  try {
    if (!ui.graph) {
      [ui.graph, ui.config] = await Promise.all([api('graph'), api('config')]);
      renderConfig(ui.config);
    }
    const [job, cps, subtasks, failures, summary] = await Promise.all([api('job'), api('checkpoints'), api('subtasks'), api('failures'), api('checkpoints/summary')]);
    await loadInflight(cps);
    ui.subtasks = subtasks;
    ui.checkpoints = cps;
    renderOverview(job, cps);
    renderGraph();
    renderVertex();
    if (ui.follow) {
      const last = cps.filter((c) => c.status === 'completed').pop();
      if (last && last.id !== ui.selectedCheckpoint) {
        ui.selectedCheckpoint = last.id;
        await loadTimeline();
      }
    }
    renderCheckpoints(cps);
    renderInflight();
    renderSummary(summary);
    renderFailures(failures);
    $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
    ui.answeredAt = Date.now();
    $('lost').replaceChildren();
  } catch (err) {
    // Loud: a page that keeps showing "running" for a job long gone
    // misleads whoever is on call.
    $('updated').textContent = `the job does not answer: ${err.message}`;
    const badge = $('job-state');
    badge.textContent = 'lost';
    badge.className = 'badge lost';
    const since = ui.answeredAt ? ` since ${new Date(ui.answeredAt).toLocaleTimeString()}` : '';
    $('lost').replaceChildren(h('div', { class: 'banner lost' },
      `Lost the job: its process does not answer${since} (${err.message}). What follows is its last known state, not its state now.`));
  }
}

// onPick calls pick with the data-id of the element matching selector
// that a click in container picked. The graph and the checkpoints are
// drawn anew at every refresh, and a refresh between a press and its
// release replaces the pressed element (and may move the row pressed, as
// checkpoints come and go): the browser then sends no click at all. So a
// pointer picks by its press and release: on the same id, or anywhere in
// the container once a refresh replaced what was pressed. A click that
// no pointer's release just handled (a script's) picks by its target.
function onPick(container, selector, pick) {
  const idOf = (e) => e.target.closest(selector)?.dataset.id ?? null;
  let pressed = null; // the element pressed
  let released = false; // a pointer's release, whose click comes next
  container.addEventListener('pointerdown', (e) => { pressed = e.button === 0 ? e.target.closest(selector) : null; });
  container.addEventListener('pointerup', (e) => {
    if (pressed && (idOf(e) === pressed.dataset.id || !pressed.isConnected)) pick(pressed.dataset.id);
    pressed = null;
    released = true;
    setTimeout(() => { released = false; }, 0);
  });
  // A press released outside the container, or cancelled, picks nothing.
  for (const k of ['pointerup', 'pointercancel']) document.addEventListener(k, () => { pressed = null; });
  container.addEventListener('click', (e) => {
    const id = idOf(e);
    if (!released && !e.pointerType && id !== null) pick(id);
  });
}

onPick($('graph'), '.vertex', (id) => { ui.selectedVertex = id; renderGraph(); renderVertex(); });
onPick($('checkpoints'), 'tr.clickable', (id) => {
  ui.selectedCheckpoint = Number(id);
  ui.follow = false;
  renderCheckpoints(ui.checkpoints);
  loadTimeline();
});
$('timeline-vertex').addEventListener('change', (e) => { ui.timelineVertex = e.target.value; renderTimeline(); });
refresh();
setInterval(refresh, POLL_MS);
initProfile();
startWorkers({ api, h, fmtBytes, fmtSeconds, fmtCount }, POLL_MS);
