// The Workers section: a cluster's worker processes as the coordinator
// sees them (/api/v1/workers), as Flink's task managers view. It polls on
// its own; main.js only starts it, handing it its helpers.

// startWorkers renders the section now and every pollMs: hidden in a
// process that runs the whole job, a table of the workers in a cluster.
export function startWorkers({ api, h, fmtBytes, fmtSeconds, fmtCount }, pollMs) {
  const section = document.getElementById('workers-section');
  const table = document.getElementById('workers');
  const note = document.getElementById('workers-note');

  const cols = [
    ['Worker'], ['State'], ['Slots used', 'num'], ['Free', 'num'], ['Heartbeat', 'num'], ['Session', 'num'],
    ['Heap', 'num'], ['Heap objects', 'num'], ['Memory', 'num'], ['GC cycles', 'num'], ['GC pauses', 'num'], ['GC CPU', 'num'],
    ['Goroutines', 'num'], ['CPU', 'num'], ['Uptime', 'num'], ['Go'], ['Tasks'],
  ];

  // stateTitle says what a worker's state means.
  const stateTitle = {
    alive: 'its heartbeats arrive',
    late: 'its last heartbeat is over two intervals old: at the heartbeat timeout it is declared lost and the job restarts without it',
    suspect: 'a call or a data connection to it failed: it gets no tasks until its next heartbeat',
    lost: 'the coordinator declared it lost; it stays listed until a process registers under its name',
  };

  function heartbeat(w) {
    if (w.state === 'lost') return `lost ${fmtSeconds(w.lostSecondsAgo || 0) || '0'} ago`;
    return w.heartbeatAgeSeconds < 0.001 ? 'just now' : `${fmtSeconds(w.heartbeatAgeSeconds)} ago`;
  }

  function row(w) {
    const p = w.process;
    const num = (text, attrs) => h('td', { class: 'num', ...attrs }, text);
    const proc = p ? [
      num(fmtBytes(p.heapBytes), { 'data-heap-bytes': p.heapBytes }),
      num(fmtCount(p.heapObjects)),
      num(fmtBytes(p.memoryBytes)),
      num(fmtCount(p.gcCycles)),
      num(fmtSeconds(p.gcPauseSeconds), { title: 'time goroutines stood stopped for GC, estimated from the runtime\'s pause histogram' }),
      num(fmtSeconds(p.gcCpuSeconds)),
      num(fmtCount(p.goroutines)),
      num(fmtSeconds(p.cpuSeconds)),
      num(fmtSeconds(p.uptimeSeconds)),
      h('td', {}, p.goVersion),
    ] : [h('td', { class: 'muted', colspan: 10 }, w.state === 'lost' ? `lost: ${w.lostReason}` : 'no heartbeat has told its process yet')];
    const tasks = w.tasks.length ? w.tasks.join(' ') : '—';
    return h('tr', { 'data-worker': w.name, 'data-state': w.state, 'data-slots-used': w.slotsUsed, class: `worker-${w.state}` },
      h('td', { title: w.dataAddress }, w.name),
      h('td', { class: 'worker-state', title: (stateTitle[w.state] || '') + (w.lostReason ? `: ${w.lostReason}` : '') }, w.state),
      num(`${w.slotsUsed} / ${w.slots}`), num(w.slotsFree),
      num(heartbeat(w), { title: w.lostReason || '' }), num(w.session),
      ...proc,
      h('td', { class: 'worker-tasks', title: tasks }, tasks));
  }

  async function refresh() {
    let ws;
    try {
      ws = await api('workers');
    } catch (err) {
      return; // the page's main refresh says the job does not answer
    }
    section.dataset.cluster = ws.cluster; // the API answered
    if (!ws.cluster) {
      section.hidden = true;
      return;
    }
    section.hidden = false;
    const live = ws.workers.filter((w) => w.state !== 'lost');
    const lost = ws.workers.length - live.length;
    note.textContent = ws.workers.length ? `${live.length} worker${live.length === 1 ? '' : 's'}, ${live.reduce((a, w) => a + w.slotsFree, 0)} slots free` + (lost ? `; ${lost} lost.` : '.')
      : 'No worker is registered (waiting for workers, or for this coordinator to lead).';
    table.replaceChildren(
      h('thead', {}, h('tr', {}, ...cols.map(([c, cls]) => h('th', { class: cls || '' }, c)))),
      h('tbody', {}, ...ws.workers.map(row)));
  }

  refresh();
  setInterval(refresh, pollMs);
}
