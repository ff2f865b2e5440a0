package weir_test

// The job generator (gen_review_test.go) on a cluster: each seed's job
// runs on an in-process coordinator and 2 or 3 workers (goroutines, each
// its own Environment, over mutual TLS on loopback), with the seed's
// settings and in-job faults, and cluster faults drawn from the seed: a
// worker stopped abruptly (its context cancelled at the k-th completed
// checkpoint or some milliseconds into the run) and a replacement under
// its name, under a new name or none; the coordinator stopped and started
// again on its address with Restore "latest", the workers staying; the
// whole cluster stopped (cancelled, or with a savepoint) and started again
// with Restore "latest" at another parallelism, on other workers. The
// committed output is checked against the same sequential model.
//
// Some seeds of the two plans that stop the cluster also go back (a
// stream of its own, so the other draws stay): the first phase takes a
// savepoint without stopping (and, cancelled, another), and the second
// starts from that savepoint's path, or from the older checkpoint the
// storage retains, rolling back what came after; its coordinator is
// killed before its first checkpoint completes and started again with
// "latest" (which must restore the same checkpoint: the start's rollback
// record), or at a checkpoint, or not. No run may restore a rolled-back
// checkpoint, and at the end a restore of the rolled-back savepoint by
// path is refused (weir.ErrRolledBack).
//
//	go test -run 'TestReviewGenCluster$' -count=1 -genc.seeds 20 -genc.first 1 .
//	go test -run 'TestReviewGenCluster$' -count=1 -genc.first 17 -genc.seeds 1 -v .
//
// A seed draws the same job as TestReviewGen's seed of the same number
// (the cluster's draw is a stream of its own), so a failing seed can be
// run in one process too. The trace of a failing seed holds the
// coordinator's events, the faults injected and every process's warnings.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/transport"
)

var (
	gencSeeds = flag.Int("genc.seeds", 0, "seeds TestReviewGenCluster runs (default 2, 1 under -race)")
	gencFirst = flag.Uint64("genc.first", 1, "TestReviewGenCluster's first seed")
	gencProbe = flag.Bool("genc.failprobe", false, "the failing checkpoint write may be a worker's probe of the storage (which fails the job for good: TestReviewClusterProbeWriteFailsOnce)")
)

// gcFault is a fault of one phase of a cluster run: when (at the k-th
// completed checkpoint of the phase, or some time after its coordinator
// listened) and what.
type gcFault struct {
	what    string // "kill" (a worker), "coordinator" (restart), "stall" (a worker's link to the coordinator)
	atCkpt  int64
	afterMs int
	worker  int    // kill: which of the phase's workers
	replace string // kill: "same" name, "new" name, "none"
	stallMs int    // stall: for how long
}

func (f gcFault) String() string {
	when := fmt.Sprintf("at checkpoint %d", f.atCkpt)
	if f.atCkpt == 0 {
		when = fmt.Sprintf("%dms in", f.afterMs)
	}
	switch f.what {
	case "kill":
		return fmt.Sprintf("kill worker %d %s, replace %s", f.worker, when, f.replace)
	case "stall":
		return fmt.Sprintf("stall worker %d's link to the coordinator %s for %dms", f.worker, when, f.stallMs)
	}
	return "restart the coordinator " + when
}

// genCluster is a job of the generator and how the cluster runs it.
type genCluster struct {
	*genJob
	plan      string // straight, rescale (cancelled and restored), savepoint (stopped with one and restored)
	phases    int
	slots     [3][]int // each phase's workers' slots
	faults    [3][]gcFault
	hbTimeout time.Duration
	// goback: the second phase restores an older checkpoint by its path
	// and its coordinator is killed "before" its first checkpoint
	// completes (killMs after the job runs) or "after" (a drawn restart
	// at a checkpoint), or "stay"s ("": no going back)
	goback string
	backTo string // "savepoint" (the first phase's first) or "checkpoint" (the older retained)
	spAt   int64  // the first savepoint is asked for at this completed checkpoint
	killMs int
}

func (g *genCluster) String() string {
	back := ""
	if g.goback != "" {
		back = fmt.Sprintf(" goback %s to %s (savepoint at %d, kill %dms)", g.goback, g.backTo, g.spAt, g.killMs)
	}
	return fmt.Sprintf("%v || cluster: plan %s phases %d slots %v faults %v heartbeat timeout %v%s", g.genJob, g.plan, g.phases, g.slots[:g.phases], g.faults[:g.phases], g.hbTimeout, back)
}

func drawCluster(seed uint64) *genCluster {
	g := &genCluster{genJob: drawJob(seed)}
	rng := rand.New(rand.NewPCG(seed, 0xc1a5))
	switch g.genJob.plan {
	case "straight":
		g.plan, g.phases = "straight", 1
	case "rescale":
		g.plan, g.phases = "rescale", 2
		if g.twice {
			g.phases = 3
		}
	default:
		g.plan, g.phases = "savepoint", 2
	}
	g.hbTimeout = time.Duration(600+rng.IntN(1400)) * time.Millisecond
	for r := range g.phases {
		// The operators without a parallelism of their own run at the
		// phase's default (gcRun.config).
		need := []int{g.srcP, g.p2, g.p3}[r]
		for _, p := range g.par[r] {
			need = max(need, p)
		}
		n := 2 + rng.IntN(2)
		total := 0
		for range n {
			s := 1 + rng.IntN(3)
			g.slots[r] = append(g.slots[r], s)
			total += s
		}
		if total < need {
			g.slots[r][n-1] += need - total
			total = need
		}
		// A phase draws no fault, a worker's kill, a coordinator's
		// restart, or both.
		k := rng.IntN(4)
		when := func() (int64, int) {
			if rng.IntN(3) == 0 {
				return 0, rng.IntN(1500)
			}
			return 1 + rng.Int64N(6), 0
		}
		if k&1 != 0 {
			f := gcFault{what: "kill", worker: rng.IntN(n), replace: []string{"same", "same", "new", "none"}[rng.IntN(4)]}
			if f.replace == "none" && total-g.slots[r][f.worker] < need {
				f.replace = "new"
			}
			f.atCkpt, f.afterMs = when()
			g.faults[r] = append(g.faults[r], f)
		}
		if k&2 != 0 {
			f := gcFault{what: "coordinator"}
			f.atCkpt, f.afterMs = when()
			g.faults[r] = append(g.faults[r], f)
		}
	}
	// Stalls come from a stream of their own: the seeds drawn before them
	// keep their faults.
	rng = rand.New(rand.NewPCG(seed, 0x57a11))
	for r := range g.phases {
		if rng.IntN(3) == 0 {
			f := gcFault{what: "stall", worker: rng.IntN(len(g.slots[r])), atCkpt: 1 + rng.Int64N(6)}
			f.stallMs = int(g.hbTimeout/time.Millisecond) + 200 + rng.IntN(1000)
			g.faults[r] = append(g.faults[r], f)
		}
	}
	// Going back too, from a stream of its own.
	rng = rand.New(rand.NewPCG(seed, 0xb0c4))
	if g.plan != "straight" && rng.IntN(2) == 0 {
		g.goback = []string{"before", "before", "after", "stay"}[rng.IntN(4)]
		g.backTo = []string{"savepoint", "savepoint", "checkpoint"}[rng.IntN(3)]
		g.spAt = 1 + rng.Int64N(3)
		g.killMs = rng.IntN(300)
		if g.goback == "after" {
			g.faults[1] = append(g.faults[1], gcFault{what: "coordinator", atCkpt: 1 + rng.Int64N(3)})
		}
	}
	return g
}

// stallProxy carries a worker's connections to the coordinator; stalled,
// it holds their bytes, both ways, until it resumes (as a network that
// drops every packet for a while and retransmits them after): the
// heartbeats stop, the worker fences itself, and the coordinator declares
// it lost; the calls then arrive late.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   chan struct{} // closed while bytes flow
	conns  []net.Conn
	closed chan struct{}
	wg     sync.WaitGroup
}

func newStallProxy(target string) (*stallProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &stallProxy{ln: ln, target: target, open: make(chan struct{}), closed: make(chan struct{})}
	close(p.open)
	p.wg.Go(p.accept)
	return p, nil
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		t, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, t)
		p.mu.Unlock()
		p.wg.Go(func() { p.copy(t, c) })
		p.wg.Go(func() { p.copy(c, t) })
	}
}

func (p *stallProxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			select {
			case <-open:
			case <-p.closed:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = make(chan struct{})
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// close closes the proxy and its connections, and waits for its
// goroutines.
func (p *stallProxy) close() {
	close(p.closed)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gcProc is a process of the cluster: its Execute runs in a goroutine
// until its context ends or the job does.
type gcProc struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	res    weir.Result
	err    error
}

// gcRun is one seed's run on a cluster.
type gcRun struct {
	g       *genCluster
	t       *testing.T
	ctx     context.Context // the seed's deadline
	dir     string
	out     string
	certs   string
	f       *genFaults
	fs      *failNthCreate
	tr      *genTrace
	mu      sync.Mutex
	procs   []*gcProc     // every process started, to stop and wait for at the end
	proxies []*stallProxy // every worker's link to the coordinator
	fresh   int           // the last new worker's number
	back    gcBack
}

// gcBack is what a seed that goes back saw and restored.
type gcBack struct {
	mu       sync.Mutex
	sps      []checkpoint.ID // savepoints completed in the first phase
	ckpts    []checkpoint.ID // periodic checkpoints completed in the first phase
	aborted  map[checkpoint.ID]bool
	max      checkpoint.ID // the newest checkpoint completed in the first phase
	to       checkpoint.ID // the checkpoint the second phase restores (0: none)
	b        checkpoint.ID // a savepoint it rolls back, to restore by path at the end
	since    bool          // a checkpoint completed after the start back to it
	restores int           // runs (attempts) that restored to
}

// event notes a coordinator's event of phase r and checks its restore.
func (c *gcRun) event(r int, ev weir.JobEvent) {
	if c.g.goback == "" {
		return
	}
	b := &c.back
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev.Kind {
	case weir.EventCheckpointCompleted:
		if r == 0 {
			if ev.Savepoint {
				b.sps = append(b.sps, ev.ID)
			} else {
				b.ckpts = append(b.ckpts, ev.ID)
			}
			b.max = max(b.max, ev.ID)
		} else if b.to != 0 {
			b.since = true
		}
	case weir.EventCheckpointAborted:
		if b.aborted == nil {
			b.aborted = map[checkpoint.ID]bool{}
		}
		b.aborted[ev.ID] = true
	case weir.EventRunning:
		if r == 0 || b.to == 0 {
			return
		}
		if !b.since && ev.RestoredFrom != b.to {
			c.t.Errorf("phase %d: attempt %d restored checkpoint %d, want %d: no checkpoint completed since the start back to it", r+1, ev.Attempt, ev.RestoredFrom, b.to)
		}
		if ev.RestoredFrom > b.to && ev.RestoredFrom <= b.max {
			c.t.Errorf("phase %d: attempt %d restored checkpoint %d, which the start back to %d rolled back", r+1, ev.Attempt, ev.RestoredFrom, b.to)
		}
		if ev.RestoredFrom == b.to {
			b.restores++
		}
	}
}

// backTarget chooses, after the first phase, the checkpoint the second
// restores, and a rolled-back savepoint; false if there is none.
func (c *gcRun) backTarget(stoppedWith checkpoint.ID) bool {
	b := &c.back
	b.mu.Lock()
	defer b.mu.Unlock()
	var own []checkpoint.ID // savepoints asked for without stopping
	for _, id := range b.sps {
		if id != stoppedWith {
			own = append(own, id)
		}
	}
	if len(own) == 0 {
		return false
	}
	b.to = own[0]
	for _, id := range b.sps {
		if id > b.to {
			b.b = id
		}
	}
	if c.g.backTo == "checkpoint" {
		// The older of the periodic checkpoints the storage retains.
		var held []checkpoint.ID
		for _, id := range b.ckpts {
			if _, err := os.Stat(filepath.Join(c.dir, "ckpt", "gen", fmt.Sprintf("chk-%d", id), "_metadata")); err == nil {
				held = append(held, id)
			}
		}
		if len(held) >= 2 {
			b.to = held[len(held)-2]
		}
	}
	return b.to < b.max
}

// traceLog is a slog.Handler that adds a process's warnings and errors to
// the trace.
type traceLog struct {
	tr    *genTrace
	attrs string
}

func (h traceLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h traceLog) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message + h.attrs
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	h.tr.add("%s", s)
	return nil
}

func (h traceLog) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.attrs += " " + a.String()
	}
	return h
}

func (h traceLog) WithGroup(string) slog.Handler { return h }

// config is phase r's configuration of a process.
func (c *gcRun) config(r int, cc weir.ClusterConfig) weir.Config {
	g := c.g
	ps := []int{g.srcP, g.p2, g.p3}
	cfg := g.config(c.dir, ps[r], c.fs, r)
	cc.Certs = c.certs
	cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, g.hbTimeout
	cfg.Cluster = cc
	name := or(cc.Name, "coordinator")
	cfg.Logger = slog.New(traceLog{tr: c.tr}).With("process", name)
	// A process's own disk: Pebble's files and local copies.
	if cfg.StateBackend.Dir != "" {
		cfg.StateBackend.Dir = filepath.Join(cfg.StateBackend.Dir, name)
	}
	if cfg.LocalRecovery {
		cfg.LocalRecoveryDir = filepath.Join(cfg.LocalRecoveryDir, name)
	}
	if r > 0 {
		cfg.Restore = "latest"
	}
	if cc.Role == weir.Worker {
		cfg.OnEvent = nil
	}
	return cfg
}

func or(s, alt string) string {
	if s != "" {
		return s
	}
	return alt
}

// start runs a process of phase r.
func (c *gcRun) start(r int, cfg weir.Config, slow bool) *gcProc {
	ctx, cancel := context.WithCancel(c.ctx)
	p := &gcProc{name: or(cfg.Cluster.Name, "coordinator"), cancel: cancel, done: make(chan struct{})}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	env := c.g.build(c.t, cfg, c.out, slow, c.f, r)
	go func() {
		defer close(p.done)
		p.res, p.err = env.Execute(ctx)
		c.tr.add("%s returned %+v %v", p.name, p.res, p.err)
	}()
	return p
}

// stop cancels p and waits for it to return; false if it did not within
// 30 s (a defect: a process that does not stop).
func (c *gcRun) stop(p *gcProc) bool {
	p.cancel()
	select {
	case <-p.done:
		return true
	case <-time.After(30 * time.Second):
		c.t.Errorf("%s did not return 30 s after its context ended", p.name)
		return false
	}
}

func (c *gcRun) newWorkerName() string {
	c.fresh++
	return fmt.Sprintf("worker-%d", c.fresh)
}

// phase runs phase r of the plan: a coordinator and workers; the phase
// ends when the job does, or (stop) after g.after completed checkpoints,
// with a cancel (rescale) or a savepoint (savepoint). It returns the last
// coordinator's result.
func (c *gcRun) phase(r int) (weir.Result, error) {
	g, t := c.g, c.t
	last := r == g.phases-1
	slow := !last || len(g.faults[r]) > 0 || r == 1 && g.goback == "before"
	var running atomic.Int64 // when the job last ran (UnixNano; 0: not yet)
	var completed atomic.Int64
	var finished atomic.Bool // the job finished (or stopped with a savepoint)
	events := make(chan struct{}, 1)
	addr, web := "", ""
	// retryBack: the start back failed to record its rollback (the
	// injected full disk) and is started again on its address, as its
	// error says, from the same checkpoint
	retryBack := false
	// coordinator starts phase r's coordinator, on any port (first) or on
	// its address again, and sets addr and web.
	coordinator := func(listen string) *gcProc {
		listening := make(chan string, 1)
		cc := weir.ClusterConfig{Role: weir.Coordinator, Listen: listen, OnListen: func(a string) { listening <- a }}
		cfg := c.config(r, cc)
		if r == 1 && c.back.to != 0 && (listen == "127.0.0.1:0" || retryBack) {
			cfg.Restore = filepath.Join(c.dir, "ckpt", "gen", fmt.Sprintf("chk-%d", c.back.to))
			if g.goback == "before" {
				cfg.Checkpoint.Interval = time.Hour // killed before its first
			}
		} else if listen != "127.0.0.1:0" {
			cfg.Restore = "latest" // a coordinator started again
		}
		cfg.OnEvent = func(ev weir.JobEvent) {
			c.tr.on(ev)
			c.event(r, ev)
			switch ev.Kind {
			case weir.EventCheckpointCompleted:
				completed.Add(1)
			case weir.EventFinished:
				finished.Store(true)
			case weir.EventRunning:
				running.CompareAndSwap(0, time.Now().UnixNano())
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
		webs := make(chan string, 1)
		if (g.plan == "savepoint" || g.goback != "") && r == 0 {
			cfg.Web, cfg.WebToken, cfg.OnWeb = "127.0.0.1:0", "tok", func(a string) { webs <- a }
		}
		p := c.start(r, cfg, slow)
		select {
		case addr = <-listening:
		case <-p.done:
			t.Fatalf("%v: phase %d: the coordinator ended before it listened: %v", g, r+1, p.err)
		}
		if cfg.Web != "" {
			web = <-webs
		}
		return p
	}
	co := coordinator("127.0.0.1:0")
	c.tr.add("phase %d: coordinator at %s", r+1, addr)
	var workers []*gcProc
	slotsOf := map[string]int{}
	links := map[*gcProc]*stallProxy{}
	worker := func(name string, slots int) *gcProc {
		slotsOf[name] = slots
		link, err := newStallProxy(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.proxies = append(c.proxies, link)
		c.mu.Unlock()
		cc := weir.ClusterConfig{Role: weir.Worker, Join: link.addr(), Name: name, Listen: "127.0.0.1:0", Slots: slots}
		w := c.start(r, c.config(r, cc), slow)
		links[w] = link
		return w
	}
	var resume []func() // stalled links, and when they resume
	var resumeAt []time.Time
	// resumeAll resumes the stalled links when the phase ends: a worker
	// must hear the job's end.
	cut := map[string]bool{} // workers whose link was stalled when the phase ended
	resumeAll := func() {
		for _, f := range resume {
			f()
		}
		resume, resumeAt = nil, nil
	}
	for _, s := range g.slots[r] {
		workers = append(workers, worker(c.newWorkerName(), s))
	}
	started := time.Now()
	pending := append([]gcFault(nil), g.faults[r]...)
	stopped := false // the stop of a phase not the last was asked for
	// going back: the savepoints the first phase asks for without stopping
	need := 0
	if r == 0 && g.goback != "" {
		need = 1
		if g.plan == "rescale" {
			need = 2 // one to go back to, one rolled back
		}
	}
	var asked checkpoint.ID // a savepoint asked for, not yet completed
	var askedN int64
	askedOf := co
	killBefore := r == 1 && g.goback == "before" && c.back.to != 0
	retryBack = false
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-events:
		case <-tick.C: // the time of the faults drawn in milliseconds
		case <-co.done:
			if r == 1 && c.back.to != 0 && running.Load() == 0 && !retryBack && errors.Is(co.err, errInjectedNoSpace) {
				c.tr.add("phase %d: the start back failed: %v; starting it again", r+1, co.err)
				retryBack = true
				co = coordinator(addr)
				retryBack = false
				continue
			}
			resumeAll()
			return c.ended(r, co, workers, stopped, cut)
		case <-c.ctx.Done():
			t.Fatalf("%v: phase %d: stuck: %d checkpoints completed in %v", g, r+1, completed.Load(), time.Since(started).Round(time.Millisecond))
		}
		n := completed.Load()
		for i := 0; i < len(resume); i++ {
			if time.Now().After(resumeAt[i]) {
				resume[i]()
				resume, resumeAt = append(resume[:i], resume[i+1:]...), append(resumeAt[:i], resumeAt[i+1:]...)
				if !finished.Load() {
					// A link that resumes after the job finished may
					// still miss its end: the coordinator waits for
					// lost workers no longer (seed 20).
					clear(cut)
				}
				i--
			}
		}
		for i := 0; i < len(pending); i++ {
			f := pending[i]
			if f.atCkpt > 0 && n < f.atCkpt || f.atCkpt == 0 && time.Since(started) < time.Duration(f.afterMs)*time.Millisecond {
				continue
			}
			pending = append(pending[:i], pending[i+1:]...)
			i--
			c.tr.add("phase %d: %v (%d checkpoints completed)", r+1, f, n)
			switch f.what {
			case "kill":
				w := workers[f.worker%len(workers)]
				if !c.stop(w) {
					t.FailNow()
				}
				c.tr.add("phase %d: %s stopped: %v", r+1, w.name, w.err)
				if finished.Load() {
					// No replacement: a worker that joins after the
					// coordinator returned looks for it for ever.
					f.replace = "none"
				}
				switch f.replace {
				case "same":
					workers[f.worker%len(workers)] = worker(w.name, slotsOf[w.name])
				case "new":
					workers[f.worker%len(workers)] = worker(c.newWorkerName(), slotsOf[w.name])
				default:
					workers = append(workers[:f.worker%len(workers)], workers[f.worker%len(workers)+1:]...)
				}
			case "stall":
				// Sleeping would choose the moment too; the ticker does.
				w := workers[f.worker%len(workers)]
				link := links[w]
				link.stall()
				resume = append(resume, func() { c.tr.add("phase %d: %s's link resumes", r+1, w.name); cut[w.name] = true; link.resume() })
				resumeAt = append(resumeAt, time.Now().Add(time.Duration(f.stallMs)*time.Millisecond))
			case "coordinator":
				if !c.stop(co) {
					t.FailNow()
				}
				if co.err == nil {
					// The job ended before the stop.
					resumeAll()
					return c.ended(r, co, workers, stopped, cut)
				}
				c.tr.add("phase %d: coordinator stopped: %v; starting it again", r+1, co.err)
				co = coordinator(addr)
			}
		}
		if need > 0 && !stopped {
			c.back.mu.Lock()
			sps := len(c.back.sps)
			lost := asked != 0 && (c.back.aborted[asked] || slices.Contains(c.back.sps, asked))
			c.back.mu.Unlock()
			if lost || askedOf != co || n > askedN+20 {
				asked = 0 // completed, aborted, or its coordinator is gone
			}
			if sps < need && asked == 0 && n >= g.spAt+int64(sps) {
				if id, err := postSavepoint(web, false); err == nil {
					c.tr.add("phase %d: savepoint %d asked for (%d checkpoints completed)", r+1, id, n)
					asked, askedN, askedOf = id, n, co
				}
			}
		}
		if killBefore {
			at := running.Load()
			if at != 0 && time.Since(time.Unix(0, at)) >= time.Duration(g.killMs)*time.Millisecond {
				killBefore = false
				c.tr.add("phase %d: killing the coordinator %dms after the job ran (%d checkpoints completed)", r+1, g.killMs, n)
				if !c.stop(co) {
					t.FailNow()
				}
				if co.err == nil {
					resumeAll()
					return c.ended(r, co, workers, stopped, cut)
				}
				co = coordinator(addr)
			}
		}
		ready := true
		if need > 0 {
			c.back.mu.Lock()
			ready = len(c.back.sps) >= need
			c.back.mu.Unlock()
		}
		if !last && !stopped && n >= g.after && ready {
			stopped = true
			if g.plan == "rescale" {
				c.tr.add("phase %d: stopping the cluster after %d checkpoints", r+1, n)
				resumeAll()
				for _, p := range append([]*gcProc{co}, workers...) {
					if !c.stop(p) {
						t.FailNow()
					}
				}
				return weir.Result{}, nil
			}
			if _, err := postSavepoint(web, true); err != nil {
				c.tr.add("phase %d: savepoint: %v", r+1, err)
				stopped = false
			}
		}
	}
}

// ended waits, after the coordinator co of phase r returned, for the
// workers to return on their own: the job ended (finished, or stopped with
// a savepoint) and every worker must hear it.
//
// A worker whose link to the coordinator was stalled when the job ended
// cannot hear it: it looks for the coordinator until it is stopped, as
// the coordinator warns.
func (c *gcRun) ended(r int, co *gcProc, workers []*gcProc, stopped bool, cut map[string]bool) (weir.Result, error) {
	if co.err != nil {
		for _, w := range workers {
			c.stop(w)
		}
		return co.res, co.err
	}
	deadline := time.After(20 * time.Second)
	for _, w := range workers {
		select {
		case <-w.done:
			if w.err != nil {
				c.t.Errorf("phase %d: worker %s returned %v after the job ended, want nil", r+1, w.name, w.err)
			}
		case <-deadline:
			if cut[w.name] {
				c.stop(w)
				continue
			}
			c.t.Errorf("phase %d: worker %s still runs 20 s after the job ended (%+v %v)", r+1, w.name, co.res, co.err)
			c.stop(w)
		}
	}
	if !stopped && co.res.StoppedWith != 0 {
		c.t.Errorf("phase %d: stopped with savepoint %d, none asked for", r+1, co.res.StoppedWith)
	}
	return co.res, co.err
}

func (g *genCluster) runCluster(t *testing.T) {
	dir := t.TempDir()
	c := &gcRun{g: g, t: t, dir: dir, out: filepath.Join(dir, "out"), certs: filepath.Join(dir, "certs"), f: &genFaults{}, tr: &genTrace{run: 1}}
	g.tr = c.tr
	c.fs = &failNthCreate{FS: vfs.Default, k: g.failWrite, tr: c.tr, spareProbes: !*gencProbe}
	names := []string{"coordinator"}
	for i := 1; i <= 16; i++ {
		names = append(names, fmt.Sprintf("worker-%d", i))
	}
	if err := transport.WriteCerts(c.certs, names, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	c.ctx = ctx
	defer dump(t, c.tr, c.out)
	// Every process ends before the test does (the package checks for
	// leaks), also when it fails.
	defer func() {
		cancel()
		c.mu.Lock()
		procs := c.procs
		c.mu.Unlock()
		for _, p := range procs {
			c.stop(p)
		}
		for _, p := range c.proxies {
			p.close()
		}
	}()
	var stoppedWith checkpoint.ID
	for r := range g.phases {
		c.tr.mu.Lock()
		c.tr.run = r + 1
		c.tr.mu.Unlock()
		if r == 1 && g.goback != "" {
			if c.backTarget(stoppedWith) {
				c.tr.add("phase 2 goes back to checkpoint %d (newest %d, rolled-back savepoint %d)", c.back.to, c.back.max, c.back.b)
			} else {
				c.tr.add("phase 2 does not go back: no savepoint taken without stopping, or nothing after it")
				c.back.to = 0
			}
		}
		res, err := c.phase(r)
		if err != nil {
			t.Fatalf("%v: phase %d: %v", g, r+1, err)
		}
		if r == 0 {
			stoppedWith = res.StoppedWith
		}
		if g.plan == "savepoint" && r == 0 {
			if res.StoppedWith == 0 {
				t.Logf("the first phase was not stopped with a savepoint: the job finished")
				break
			}
			t.Logf("stopped with savepoint %d", res.StoppedWith)
		}
	}
	if g.goback != "" {
		t.Logf("went back to checkpoint %d of %d (savepoints %v, rolled-back savepoint %d): %d runs restored it", c.back.to, c.back.max, c.back.sps, c.back.b, c.back.restores)
	}
	c.refusesRolledBack()
	g.verify(t, c.out, c.f, c.fs)
	if c.fresh > 16 {
		panic("more workers than certificates") // NB: drawCluster starts at most 3 a phase and 2 new ones
	}
}

func TestReviewGenCluster(t *testing.T) {
	seeds := *gencSeeds
	if seeds == 0 {
		seeds = 2
		if weir.RaceEnabled {
			seeds = 1 // the race detector slows a seed about tenfold
		}
	}
	for seed := *gencFirst; seed < *gencFirst+uint64(seeds); seed++ {
		g := drawCluster(seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			start := time.Now()
			g.runCluster(t)
			t.Logf("%v: %v", g, time.Since(start).Round(time.Millisecond))
		})
	}
}

// refusesRolledBack starts, after a seed went back, a coordinator from the
// savepoint that start rolled back, by its path: it must be refused
// (weir.ErrRolledBack), having deleted nothing (the output is verified
// after).
func (c *gcRun) refusesRolledBack() {
	b := c.back.b
	if c.g.goback == "" || c.back.to == 0 || b == 0 {
		return
	}
	c.tr.mu.Lock()
	c.tr.run++
	c.tr.mu.Unlock()
	r := c.g.phases - 1
	cfg := c.config(r, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0"})
	cfg.Restore = filepath.Join(c.dir, "ckpt", "gen", fmt.Sprintf("chk-%d", b))
	cfg.OnEvent = c.tr.on
	p := c.start(r, cfg, false)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		c.t.Errorf("a coordinator restoring rolled-back savepoint %d was not refused in 30 s", b)
		c.stop(p)
		return
	}
	if !errors.Is(p.err, weir.ErrRolledBack) {
		c.t.Errorf("restore of rolled-back savepoint %d by path: %v, want weir.ErrRolledBack", b, p.err)
	}
}
