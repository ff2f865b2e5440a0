package weir_test

// The review's generator of restore histories: from a seed, a job
// (drawJob: sources, operators, faults) and a history of 3–8 runs against
// one checkpoint directory and one output directory, then a run to the end
// of input. A run starts plainly, with --restore latest, with --restore
// <path> of a checkpoint or savepoint in the directory (older ones too),
// or with --fresh, sometimes after the newest checkpoint's _metadata had a
// byte flipped; at a parallelism and backend drawn for it. It ends
// cancelled after k checkpoints (one run takes a savepoint without
// stopping first), stopped with a savepoint (POST
// /api/v1/savepoints?stop=true), killed before it completes a checkpoint
// of its own (cancelled once its sinks opened, or a panic without
// restarts), or at the end of its input.
//
// A model of the directory (which checkpoints exist, savepoint or not,
// damaged or not, their lineage, which ones a rollback rolled back, the
// output's recorded lineage) predicts every start: refused, and with which
// error (errors.Is), or accepted, and which checkpoint it restores
// (EventRunning's RestoredFrom). After every run the model's checkpoints
// must be those in the directory; at the end the committed output must be
// the job's exactly once (genJob.verify).
//
//	go test . -run TestReviewGenHistory -count=1 -args -genh.seeds 20 -genh.first 1
//
// -genh.rollbackrule=false predicts today's --restore latest after a
// rollback (the newest checkpoint) and draws no start that restores
// rolled-back output (a known defect), to hunt other defects.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/internal/racetest"
)

var (
	genhSeeds        = flag.Int("genh.seeds", 0, "seeds TestReviewGenHistory runs (default 2, 1 under -race)")
	genhFirst        = flag.Uint64("genh.first", 1, "TestReviewGenHistory's first seed")
	genhRollbackRule = flag.Bool("genh.rollbackrule", true, "expect the rollback rules (latest restores a rollback's checkpoint until one of its own completes; a rolled-back checkpoint is refused, ErrRolledBack); false: expect today's latest and draw no restore of rolled-back output")
)

// hCkpt is a checkpoint or savepoint of the model. Identity is the
// pointer: ids are reused after a rollback.
type hCkpt struct {
	id        checkpoint.ID
	savepoint bool
	lineage   int
	run       int // the run that took it: (run, id) is trigger order
	damaged   bool
	// rolledBack: a start restored an older checkpoint of its lineage while
	// it existed, and the sinks rolled back its output.
	rolledBack bool
}

func (c *hCkpt) String() string {
	s := fmt.Sprintf("%d", c.id)
	if c.savepoint {
		s += "sp"
	}
	s += fmt.Sprintf("(L%d r%d", c.lineage, c.run)
	if c.damaged {
		s += " damaged"
	}
	if c.rolledBack {
		s += " rolled-back"
	}
	return s + ")"
}

// after reports whether c was triggered after d.
func (c *hCkpt) after(d *hCkpt) bool {
	return c.run > d.run || c.run == d.run && c.id > d.id
}

type hModel struct {
	ckpts    []*hCkpt // in the directory, ascending by id
	lineages int
	// outLineage is the lineage the sinks recorded in the output
	// directory (0: none).
	outLineage int
	// override is the checkpoint a rollback restored: with the rule,
	// --restore latest restores it again until a checkpoint completes.
	override *hCkpt
}

func (m *hModel) String() string {
	var s []string
	for _, c := range m.ckpts {
		s = append(s, c.String())
	}
	o := "-"
	if m.override != nil {
		o = m.override.String()
	}
	return fmt.Sprintf("[%s] out L%d override %s", strings.Join(s, " "), m.outLineage, o)
}

func (m *hModel) sort() {
	slices.SortFunc(m.ckpts, func(a, b *hCkpt) int { return int(a.id) - int(b.id) })
}

// latest is the checkpoint --restore latest restores (nil: none).
func (m *hModel) latest(rule bool) *hCkpt {
	if rule && m.override != nil && slices.Contains(m.ckpts, m.override) && !m.override.damaged {
		return m.override
	}
	for i := len(m.ckpts) - 1; i >= 0; i-- {
		c := m.ckpts[i]
		if c.damaged || rule && c.rolledBack {
			continue
		}
		return c
	}
	return nil
}

func (m *hModel) newest() *hCkpt {
	for i := len(m.ckpts) - 1; i >= 0; i-- {
		if !m.ckpts[i].damaged {
			return m.ckpts[i]
		}
	}
	return nil
}

type hStartKind int

const (
	hPlain hStartKind = iota
	hLatest
	hPath
	hFresh
)

type hEndKind int

const (
	hCancelAfter hEndKind = iota // k checkpoints, then cancel
	hStopSavepoint
	hKillCancel // cancelled before a checkpoint of its own
	hKillPanic  // a panic at the first record, no restarts
	hToEnd
)

type hStep struct {
	start  hStartKind
	target *hCkpt // hPath
	damage bool   // flip a byte of the newest checkpoint's _metadata first
	end    hEndKind
	k      int // hCancelAfter, hStopSavepoint: checkpoints first
	spAt   int // hCancelAfter: a savepoint without stop after this many (0: none)
	// atOnce: hKillCancel of a restore cancels at once, maybe before the
	// sinks rolled back anything.
	atOnce bool
	par    int // index into g.par
	be     int // index into g.backends (never decreasing)
}

func (s hStep) String() string {
	var st string
	switch s.start {
	case hPlain:
		st = "plain"
	case hLatest:
		st = "latest"
	case hPath:
		st = "path " + s.target.String()
	case hFresh:
		st = "fresh"
	}
	if s.damage {
		st = "damage newest, " + st
	}
	var end string
	switch s.end {
	case hCancelAfter:
		end = fmt.Sprintf("cancel after %d", s.k)
		if s.spAt > 0 {
			end += fmt.Sprintf(" (savepoint after %d)", s.spAt)
		}
	case hStopSavepoint:
		end = fmt.Sprintf("stop with savepoint after %d", s.k)
	case hKillCancel:
		end = "cancel before a checkpoint"
		if s.atOnce {
			end += ", at once"
		}
	case hKillPanic:
		end = "panic, no restart"
	case hToEnd:
		end = "to the end"
	}
	return fmt.Sprintf("%s; %s; par %d backend %d", st, end, s.par, s.be)
}

// hPrediction is what a start must do.
type hPrediction struct {
	// refused: the start fails with one of these (errors.Is); sinkRefused:
	// the runtime accepted it (from is restored, newer checkpoints are
	// deleted) and the sinks refuse it.
	refused     []error
	sinkRefused bool
	from        *hCkpt // restored (nil: from the beginning)
	why         string
}

func (p hPrediction) String() string {
	if len(p.refused) > 0 {
		return fmt.Sprintf("refused %v (sink %v, from %v): %s", p.refused, p.sinkRefused, p.from, p.why)
	}
	return fmt.Sprintf("restores %v: %s", p.from, p.why)
}

// hist runs one seed's history.
type hist struct {
	t      *testing.T
	g      *genJob
	rng    *rand.Rand
	rule   bool
	dir    string
	out    string
	ckpt   string // the job's checkpoint directory
	f      *genFaults
	fs     *failNthCreate
	tr     *genTrace
	m      hModel
	be     int
	log    []string
	nSinks int
}

func (h *hist) logf(format string, args ...any) {
	h.log = append(h.log, fmt.Sprintf(format, args...))
	h.tr.add(format, args...)
}

// committedOut lists the committed output files with their checkpoint ids.
func (h *hist) committedOut() map[string]checkpoint.ID {
	ents, _ := os.ReadDir(h.out)
	files := map[string]checkpoint.ID{}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "part-") {
			continue
		}
		id, _ := strconv.ParseUint(n[strings.LastIndex(n, "-")+1:], 10, 64)
		files[n] = checkpoint.ID(id)
	}
	return files
}

// lineageFiles are the contents of the sinks' .lineage-<uid> files.
func (h *hist) lineageFiles() map[string]string {
	ents, _ := os.ReadDir(h.out)
	got := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".lineage-") && !strings.HasSuffix(n, ".tmp") {
			b, _ := os.ReadFile(filepath.Join(h.out, n))
			got[n] = string(b)
		}
	}
	return got
}

// predict is what start s must do, given the model.
func (h *hist) predict(s hStep) hPrediction {
	m := &h.m
	fromNothing := func(why string) hPrediction {
		if len(h.committedOut()) > 0 {
			return hPrediction{refused: []error{file.ErrEarlierOutput}, sinkRefused: true, why: why + ", over committed output"}
		}
		return hPrediction{why: why}
	}
	switch s.start {
	case hFresh:
		return hPrediction{why: "fresh"}
	case hPlain:
		if len(m.ckpts) > 0 {
			return hPrediction{refused: []error{weir.ErrEarlierRun}, why: "plain start over checkpoints"}
		}
		return fromNothing("plain start, no checkpoints")
	case hLatest:
		c := m.latest(h.rule)
		if c == nil {
			if len(m.ckpts) > 0 {
				return hPrediction{refused: []error{weir.ErrEarlierRun}, why: "latest: only damaged checkpoints"}
			}
			return fromNothing("latest: no checkpoints")
		}
		return h.restoreRules(c, "latest")
	default:
		return h.restoreRules(s.target, "path")
	}
}

func (h *hist) restoreRules(c *hCkpt, how string) hPrediction {
	m := &h.m
	var runtime []error
	var why []string
	for _, d := range m.ckpts {
		if !d.damaged && d.after(c) && d.lineage != c.lineage {
			runtime = append(runtime, weir.ErrStartedOver)
			why = append(why, fmt.Sprintf("%v is newer, of another lineage", d))
			break
		}
	}
	if h.rule && c.rolledBack {
		runtime = append(runtime, weir.ErrRolledBack)
		why = append(why, "rolled back")
	}
	if len(runtime) > 0 {
		return hPrediction{refused: runtime, from: c, why: fmt.Sprintf("%s %v: %s", how, c, strings.Join(why, "; "))}
	}
	if m.outLineage != 0 && m.outLineage != c.lineage {
		return hPrediction{refused: []error{weir.ErrStartedOver}, sinkRefused: true, from: c,
			why: fmt.Sprintf("%s %v: the output's lineage is L%d", how, c, m.outLineage)}
	}
	return hPrediction{from: c, why: fmt.Sprintf("%s %v", how, c)}
}

// accept applies a start the runtime accepted to the model; it returns
// the run's lineage.
func (h *hist) accept(s hStep, p hPrediction) int {
	m := &h.m
	switch {
	case s.start == hFresh:
		m.ckpts = slices.DeleteFunc(m.ckpts, func(c *hCkpt) bool { return !c.savepoint || c.damaged })
		fallthrough
	case p.from == nil:
		m.lineages++
		m.override = nil
		if !p.sinkRefused {
			m.outLineage = m.lineages
		}
		return m.lineages
	}
	c := p.from
	newer := false
	for _, d := range m.ckpts {
		if d.id > c.id {
			newer = true
			if d.lineage == c.lineage {
				d.rolledBack = true
			}
		}
	}
	m.ckpts = slices.DeleteFunc(m.ckpts, func(d *hCkpt) bool { return d.id > c.id && (!d.savepoint || d.damaged) })
	m.override = nil
	if newer {
		m.override = c
	}
	return c.lineage
}

// completed applies a checkpoint completed by run (lineage l) to the
// model, as the coordinator retains them (2 checkpoints, every savepoint).
func (h *hist) completed(run, l int, id checkpoint.ID, savepoint bool) {
	m := &h.m
	m.ckpts = slices.DeleteFunc(m.ckpts, func(d *hCkpt) bool { return d.damaged })
	m.override = nil
	var retained []*hCkpt
	for _, d := range m.ckpts {
		if !d.savepoint {
			retained = append(retained, d)
		}
	}
	if !savepoint && len(retained) > 0 && retained[len(retained)-1].id > id {
		return // a newer checkpoint completed first
	}
	m.ckpts = append(m.ckpts, &hCkpt{id: id, savepoint: savepoint, lineage: l, run: run})
	if !savepoint {
		retained = append(retained, m.ckpts[len(m.ckpts)-1])
		for len(retained) > 2 {
			old := retained[0]
			retained = retained[1:]
			m.ckpts = slices.DeleteFunc(m.ckpts, func(d *hCkpt) bool { return d == old })
		}
	}
	m.sort()
}

// directory lists the checkpoints in the directory that have metadata.
func (h *hist) directory() []checkpoint.ID {
	ents, _ := os.ReadDir(h.ckpt)
	var ids []checkpoint.ID
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "chk-")
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join(h.ckpt, e.Name(), "_metadata")); err != nil {
			continue
		}
		id, _ := strconv.ParseUint(rest, 10, 64)
		ids = append(ids, checkpoint.ID(id))
	}
	slices.Sort(ids)
	return ids
}

func (h *hist) modelIDs() []checkpoint.ID {
	var ids []checkpoint.ID
	for _, c := range h.m.ckpts {
		ids = append(ids, c.id)
	}
	return ids
}

// damageNewest flips a byte of the newest checkpoint's metadata payload.
func (h *hist) damageNewest() {
	c := h.m.newest()
	path := filepath.Join(h.ckpt, fmt.Sprintf("chk-%d", c.id), "_metadata")
	b, err := os.ReadFile(path)
	if err != nil || len(b) <= 20 {
		h.t.Fatalf("damage %s: %v (%d bytes)", path, err, len(b))
	}
	i := 20 + h.rng.IntN(len(b)-20)
	b[i] ^= 0x5a
	if err := os.WriteFile(path, b, 0o644); err != nil {
		h.t.Fatal(err)
	}
	c.damaged = true
	h.logf("damaged checkpoint %v's metadata at byte %d", c, i)
}

// drawStart draws how a run starts. Without the rollback rule it draws no
// start that would restore rolled-back output.
func (h *hist) drawStart(s *hStep) {
	m := &h.m
	for try := 0; ; try++ {
		*s = hStep{par: s.par, be: s.be, end: s.end, k: s.k, spAt: s.spAt, atOnce: s.atOnce}
		var usable []*hCkpt
		for _, c := range m.ckpts {
			if !c.damaged {
				usable = append(usable, c)
			}
		}
		switch x := h.rng.IntN(100); {
		case try > 20 || x < 8:
			s.start = hFresh
		case x < 13:
			s.start = hPlain
		case x < 25 && len(usable) > 0:
			s.start, s.damage = hLatest, true
		case x < 50 && len(usable) > 0:
			s.start = hPath
			s.target = usable[h.rng.IntN(len(usable))]
		default:
			s.start = hLatest
		}
		if h.rule || s.start == hFresh {
			return
		}
		// Today's behaviour restores rolled-back output: draw again.
		var c *hCkpt
		switch s.start {
		case hPath:
			c = s.target
		case hLatest:
			for i := len(m.ckpts) - 1; i >= 0; i-- {
				if !m.ckpts[i].damaged && (!s.damage || m.ckpts[i] != m.newest()) {
					c = m.ckpts[i]
					break
				}
			}
		}
		if c == nil || !c.rolledBack {
			return
		}
	}
}

func (h *hist) drawEnd(s *hStep, last bool) {
	s.par = h.rng.IntN(3)
	h.be = max(h.be, h.rng.IntN(3))
	s.be = h.be
	if last {
		s.end = hToEnd
		return
	}
	switch x := h.rng.IntN(100); {
	case x < 35:
		s.end, s.k = hCancelAfter, 1+h.rng.IntN(4)
	case x < 50:
		s.end, s.k = hCancelAfter, 2+h.rng.IntN(3)
		s.spAt = 1 + h.rng.IntN(s.k-1)
	case x < 70:
		s.end, s.k = hStopSavepoint, 1+h.rng.IntN(3)
	case x < 85:
		s.end = hKillCancel
		s.atOnce = h.rng.IntN(3) == 0
	case x < 95:
		s.end = hKillPanic
	default:
		s.end = hToEnd
	}
}

// hRunEvents collects a run's events; OnEvent must not block.
type hRunEvents struct {
	mu     sync.Mutex
	events []weir.JobEvent
	notify chan struct{}
}

func (e *hRunEvents) on(ev weir.JobEvent) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *hRunEvents) snapshot() []weir.JobEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

type hResult struct {
	r   weir.Result
	err error
}

// run runs step s (run number run) and returns its result and events.
func (h *hist) run(run int, s hStep, p hPrediction) (hResult, []weir.JobEvent) {
	t, g := h.t, h.g
	ps := []int{g.srcP, g.p2, g.p3}
	cfg := g.config(h.dir, ps[s.par], h.fs, s.be)
	switch s.start {
	case hLatest:
		cfg.Restore = "latest"
	case hPath:
		cfg.Restore = filepath.Join(h.ckpt, fmt.Sprintf("chk-%d", s.target.id))
	case hFresh:
		cfg.Fresh = true
	}
	ev := &hRunEvents{notify: make(chan struct{}, 1)}
	cfg.OnEvent = func(e weir.JobEvent) {
		h.tr.on(e)
		ev.on(e)
	}
	addrs := make(chan string, 1)
	if s.end == hCancelAfter && s.spAt > 0 || s.end == hStopSavepoint {
		cfg.Web, cfg.WebToken, cfg.OnWeb = "127.0.0.1:0", "tok", func(a string) { addrs <- a }
	}
	jg, f := g, h.f
	switch s.end {
	case hKillCancel:
		cfg.Checkpoint.Interval = time.Hour // none of its own before the cancel
	case hKillPanic:
		cfg.Checkpoint.Interval = time.Hour
		cfg.Restart = weir.NoRestart{}
		if g.mapV || g.mapPanicAt > 0 { // the map is in every run's job
			g2 := *g
			g2.mapPanicAt = 1
			jg, f = &g2, &genFaults{}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.NewTimer(jobDeadline)
	defer deadline.Stop()
	env := jg.build(t, cfg, h.out, s.end != hToEnd, f, s.par)
	done := make(chan hResult, 1)
	go func() {
		r, err := env.Execute(ctx)
		done <- hResult{r, err}
	}()
	if len(p.refused) > 0 {
		return <-done, ev.snapshot()
	}
	// What the kill waits for: the sinks opened (a start from nothing
	// recorded its lineage in every sink and deleted earlier output; a
	// restore rolled back the output after its checkpoint).
	lineBefore := h.lineageFiles()
	opened := func() bool {
		if s.atOnce && p.from != nil {
			return true
		}
		files := h.committedOut()
		if p.from == nil {
			now := h.lineageFiles()
			if len(now) < h.nSinks {
				return false
			}
			for n, l := range now {
				if lineBefore[n] == l {
					return false
				}
			}
			return len(files) == 0
		}
		for _, id := range files {
			if id > p.from.id {
				return false
			}
		}
		return true
	}
	var poll <-chan time.Time
	if s.end == hKillCancel {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		poll = tick.C
	}
	seen, own := 0, 0
	var spID checkpoint.ID
	spDone := s.spAt == 0
	stopTries, stopping := 0, false
	addr := ""
	var ended *hResult
	getAddr := func() string {
		if addr == "" {
			select {
			case addr = <-addrs:
			case r := <-done:
				ended = &r
			}
		}
		return addr
	}
	for {
		if ended != nil {
			return *ended, ev.snapshot()
		}
		select {
		case r := <-done:
			return r, ev.snapshot()
		case <-poll:
			if opened() {
				cancel()
				poll = nil
			}
			continue
		case <-ev.notify:
		case <-deadline.C:
			t.Fatalf("run %d (%v): stuck: no end within %v", run, s, jobDeadline)
		}
		evs := ev.snapshot()
		for _, e := range evs[seen:] {
			switch {
			case e.Kind == weir.EventCheckpointCompleted && !e.Savepoint:
				own++
			case e.Kind == weir.EventCheckpointCompleted && e.ID == spID,
				e.Kind == weir.EventCheckpointAborted && e.ID == spID && spID != 0:
				spDone = true
			}
		}
		seen = len(evs)
		switch s.end {
		case hCancelAfter:
			if s.spAt > 0 && spID == 0 && !spDone && own >= s.spAt {
				a := getAddr()
				if a == "" {
					break
				}
				id, err := postSavepoint(a, false)
				if err != nil {
					h.logf("run %d: savepoint: %v", run, err)
					spDone = true
				}
				spID = id
			}
			if own >= s.k && spDone {
				cancel()
			}
		case hStopSavepoint:
			if !stopping && own >= s.k+stopTries && stopTries < 3 {
				stopTries++
				if a := getAddr(); a == "" {
					break
				} else if _, err := postSavepoint(a, true); err == nil {
					stopping = true
				} else {
					h.logf("run %d: stop with savepoint: %v", run, err)
					if stopTries == 3 {
						cancel()
					}
				}
			}
		}
	}
}

// step runs one step and checks it against the prediction; false: the
// history cannot go on.
func (h *hist) step(run int, s hStep) bool {
	t := h.t
	h.tr.mu.Lock()
	h.tr.run = run
	h.tr.mu.Unlock()
	if s.damage {
		h.damageNewest()
	}
	p := h.predict(s)
	if s.end == hKillPanic && (p.from == nil || p.sinkRefused || !(h.g.mapV || h.g.mapPanicAt > 0)) {
		// The panic could come before the sinks open (and refuse, if they
		// are to: every task starts at once), or there is no map.
		s.end = hKillCancel
	}
	h.logf("run %d: %v; model %v; predicted: %v", run, s, &h.m, p)
	res, evs := h.run(run, s, p)
	if res.err != nil && strings.Contains(res.err.Error(), "could not be recorded") && strings.Contains(res.err.Error(), "injected:") {
		// The injected fault hit the start's rollback record: the start
		// failed before it restored or deleted anything (the directory
		// check after this run holds it to that), and it fires once.
		h.logf("run %d: the start could not record its rollback (%v); starting again", run, res.err)
		res, evs = h.run(run, s, p)
	}
	var running *weir.JobEvent
	for i, e := range evs {
		if e.Kind == weir.EventRunning && e.Attempt == 1 {
			running = &evs[i]
			break
		}
	}
	if running != nil {
		h.logf("run %d: restored %d (savepoint %v), ended %v, stopped with %d", run, running.RestoredFrom, running.RestoredSavepoint, res.err, res.r.StoppedWith)
	} else {
		h.logf("run %d: did not run: %v", run, res.err)
	}
	wantFrom := checkpoint.ID(0)
	if p.from != nil {
		wantFrom = p.from.id
	}
	fail := func(kind, format string, args ...any) bool {
		t.Errorf("%s: run %d (%v): %s\n  predicted: %v\n  history:\n    %s", kind, run, s, fmt.Sprintf(format, args...), p, strings.Join(h.log, "\n    "))
		return false
	}
	if len(p.refused) > 0 {
		ok := false
		for _, want := range p.refused {
			ok = ok || errors.Is(res.err, want)
		}
		if !ok {
			kind := "refusal"
			if slices.Contains(p.refused, weir.ErrRolledBack) {
				kind = "ROLLED-BACK-RESTORED"
			} else if h.rule && p.from != nil && running != nil && running.RestoredFrom != wantFrom && h.m.newest() != nil && running.RestoredFrom == h.m.newest().id {
				kind = "FALLBACK-TO-ROLLED-BACK" // refused all the same
			}
			h.consequences(running, res)
			return fail(kind, "want an error matching %v, got %v (restored %v)", p.refused, res.err, restoredOf(running))
		}
		if p.sinkRefused {
			if p.from != nil && (running == nil || running.RestoredFrom != wantFrom) {
				return fail("restore", "the sinks' refusal: restored %v, want %d", restoredOf(running), wantFrom)
			}
			h.accept(s, p)
		}
		return h.checkDirectory(run, s)
	}
	if running == nil {
		return fail("start", "refused: %v", res.err)
	}
	if running.RestoredFrom != wantFrom || p.from != nil && running.RestoredSavepoint != p.from.savepoint {
		kind := "restore"
		switch {
		case s.start == hLatest && p.from != nil && h.m.override == p.from:
			kind = "LATEST-AFTER-ROLLBACK"
		case s.start == hLatest && h.rule && h.m.newest() != nil && running.RestoredFrom == h.m.newest().id:
			kind = "FALLBACK-TO-ROLLED-BACK"
		}
		h.consequences(running, res)
		return fail(kind, "restored %d (savepoint %v), want %d; the run ended with %v", running.RestoredFrom, running.RestoredSavepoint, wantFrom, res.err)
	}
	l := h.accept(s, p)
	for _, e := range evs {
		if e.Kind == weir.EventCheckpointCompleted {
			h.completed(run, l, e.ID, e.Savepoint)
		}
	}
	switch {
	case s.end == hToEnd && (res.err != nil || res.r.StoppedWith != 0):
		return fail("end", "a run to the end: %v, stopped with %d", res.err, res.r.StoppedWith)
	case s.end == hKillPanic && res.err == nil:
		h.logf("run %d: the panic did not fail the run (no map, or it finished first)", run)
	case res.err != nil && !errors.Is(res.err, context.Canceled) && s.end != hKillPanic:
		return fail("end", "the run failed: %v", res.err)
	}
	return h.checkDirectory(run, s)
}

// consequences checks the output of a run that restored what the model
// says it must not have, and ended at the end of its input: what the
// defect costs (lost or duplicated output), beside the failed prediction.
func (h *hist) consequences(running *weir.JobEvent, res hResult) {
	if running != nil && res.err == nil && res.r.StoppedWith == 0 {
		h.t.Logf("the run restored %d and ran to the end: its output, checked", running.RestoredFrom)
		h.g.verify(h.t, h.out, h.f, h.fs)
	}
}

func restoredOf(e *weir.JobEvent) any {
	if e == nil {
		return "nothing (no attempt ran)"
	}
	return e.RestoredFrom
}

func (h *hist) checkDirectory(run int, s hStep) bool {
	if got, want := h.directory(), h.modelIDs(); !slices.Equal(got, want) {
		h.t.Errorf("directory: after run %d (%v) the directory holds checkpoints %v, the model %v\n  history:\n    %s", run, s, got, &h.m, strings.Join(h.log, "\n    "))
		return false
	}
	return true
}

func runHistory(t *testing.T, seed uint64, rule bool) {
	g := drawJob(seed)
	dir := t.TempDir()
	h := &hist{t: t, g: g, rng: rand.New(rand.NewPCG(seed, 0x415)), rule: rule, dir: dir,
		out: filepath.Join(dir, "out"), ckpt: filepath.Join(dir, "ckpt", "gen"), f: &genFaults{}, tr: &genTrace{run: 1}}
	g.tr = h.tr
	h.fs = &failNthCreate{FS: vfs.Default, k: g.failWrite, tr: h.tr}
	for _, b := range []bool{g.reduce, g.proc, g.window, g.window, g.join} {
		if b {
			h.nSinks++
		}
	}
	defer dump(t, h.tr, h.out)
	steps := 3 + h.rng.IntN(6)
	for run := 1; run <= steps+1; run++ {
		var s hStep
		last := run == steps+1
		h.drawEnd(&s, last)
		switch {
		case run == 1:
			s.start = []hStartKind{hPlain, hFresh, hLatest}[h.rng.IntN(3)]
		case last:
			s.start = hLatest
			if p := h.predict(s); len(p.refused) > 0 || !rule && p.from != nil && p.from.rolledBack {
				s.start = hFresh
			}
		default:
			h.drawStart(&s)
		}
		if !h.step(run, s) {
			return
		}
	}
	g.verify(t, h.out, h.f, h.fs)
	t.Logf("history:\n    %s", strings.Join(h.log, "\n    "))
}

func TestReviewGenHistory(t *testing.T) {
	seeds := *genhSeeds
	if seeds == 0 {
		seeds = 2
		// The driver's start, which the histories exercise, runs on one
		// goroutine: -genh.seeds N runs them under -race.
		racetest.Skip(t)
	}
	for seed := *genhFirst; seed < *genhFirst+uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			start := time.Now()
			runHistory(t, seed, *genhRollbackRule)
			t.Logf("seed %d: %v", seed, time.Since(start).Round(time.Millisecond))
		})
	}
}
