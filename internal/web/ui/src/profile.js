// The Profile section: a CPU flame graph of this process, or of a worker
// of a cluster through the coordinator, of every vertex or one, from
// GET /api/v1/flamegraph. Profiling needs the job's token (--web-token);
// the page keeps it in sessionStorage (this tab, until it closes). Drawn
// by d3-flame-graph: each frame is an svg g.frame whose name attribute is
// its function's.
import { select } from 'd3-selection';
import flamegraph from 'd3-flame-graph';

const TOKEN_KEY = 'weir.webToken';

const byId = (id) => document.getElementById(id);

function option(value, text) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  return o;
}

// fillSelect replaces a select's options, keeping its choice if it is
// still offered.
function fillSelect(sel, options) {
  const keep = sel.value;
  sel.replaceChildren(...options.map(([v, t]) => option(v, t)));
  if (options.some(([v]) => v === keep)) sel.value = keep;
}

async function getJSON(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(`GET ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

// loadChoices offers the job graph's vertices and the live workers.
async function loadChoices() {
  const [graph, cluster] = await Promise.all([getJSON('api/v1/graph'), getJSON('api/v1/workers')]);
  fillSelect(byId('profile-vertex'), [['', 'every vertex'], ...graph.vertices.map((v) => [v.id, v.id])]);
  const workers = cluster.workers.filter((w) => w.state !== 'lost').map((w) => w.name);
  const processes = [['', cluster.cluster ? 'the coordinator (this process)' : 'this process']];
  for (const w of workers) processes.push([w, `worker ${w}`]);
  fillSelect(byId('profile-worker'), processes);
}

function fmtPercent(x) {
  return `${(100 * x).toFixed(1)}%`;
}

// drawFlameGraph draws g, an /api/v1/flamegraph answer, into #flamegraph.
function drawFlameGraph(g) {
  const into = byId('flamegraph');
  into.replaceChildren();
  const width = Math.max(into.clientWidth || 0, 600);
  const chart = flamegraph().width(width).cellHeight(18).transitionDuration(0).sort(true).minFrameSize(0);
  select(into).datum(g.root).call(chart);
  // NB: d3-flame-graph sizes the frames and writes their labels in
  // transitions (of 250 ms, whatever transitionDuration says), which a
  // page in the background, or headless, may not run for long: set them
  // now, as the frames' foreignObjects already are.
  select(into).selectAll('g.frame').each(function (d) {
    const frame = select(this);
    frame.select('rect').interrupt().attr('width', frame.select('foreignObject').attr('width'));
    frame.select('foreignObject div').interrupt().text(d.data.name);
  });
}

// describe says what a flame graph holds: the samples, the process, the
// vertex and how much of the profile it is.
function describe(g) {
  const who = g.worker ? `worker ${g.worker}` : 'this process';
  const secs = g.durationSeconds.toFixed(1);
  const cpu = ((g.samples * g.periodNanos) / 1e9).toFixed(2);
  let what = `${g.samples} samples (${cpu} s of CPU) of ${who} over ${secs} s`;
  if (g.vertex) {
    const of = g.totalSamples ? fmtPercent(g.samples / g.totalSamples) : '0%';
    what += `, vertex ${g.vertex}: ${of} of the process's ${g.totalSamples}`;
  }
  return what + '. Click a frame to zoom in, the bottom one to zoom out.';
}

async function takeProfile(ev) {
  ev.preventDefault();
  const status = byId('profile-status');
  const button = byId('profile-start');
  const token = byId('profile-token').value.trim();
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  const seconds = byId('profile-seconds').value;
  const params = new URLSearchParams({ seconds });
  const vertex = byId('profile-vertex').value;
  const worker = byId('profile-worker').value;
  if (vertex) params.set('vertex', vertex);
  if (worker) params.set('worker', worker);
  button.disabled = true;
  status.className = 'muted';
  status.textContent = `profiling ${worker ? 'worker ' + worker : 'this process'} for ${seconds} s…`;
  try {
    const r = await fetch('api/v1/flamegraph?' + params, { headers: token ? { Authorization: 'Bearer ' + token } : {} });
    if (!r.ok) throw new Error(`${r.status}: ${(await r.text()).trim()}`);
    const g = await r.json();
    if (g.samples === 0) {
      byId('flamegraph').replaceChildren();
      status.textContent = g.vertex
        ? `No sample of vertex ${g.vertex} in ${g.totalSamples} of ${g.worker ? 'worker ' + g.worker : 'this process'}: its tasks used no CPU then, or run in another process.`
        : 'No sample: the process used no CPU then.';
      return;
    }
    drawFlameGraph(g);
    status.textContent = describe(g);
  } catch (err) {
    status.className = 'error';
    status.textContent = `No profile: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

// initProfile wires the Profile section, if the page has one.
export function initProfile() {
  if (!byId('profile')) return;
  byId('profile-token').value = sessionStorage.getItem(TOKEN_KEY) || '';
  byId('profile-form').addEventListener('submit', takeProfile);
  // Workers come and go: offer those live when the choice is made.
  byId('profile-worker').addEventListener('focus', () => loadChoices().catch(() => {}));
  loadChoices().catch((err) => {
    byId('profile-status').textContent = `cannot list what to profile: ${err.message}`;
  });
}
