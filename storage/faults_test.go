package storage_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/racetest"
	"github.com/weirstream/weir/storage"
)

// The storage-fault generator (issue 19, section E): a real word count
// runs, is killed and restarts, over checkpoint storage whose every call
// may fail with a transient error on a schedule drawn from a seed, and
// with proven damage planted between runs. After every run it checks:
//
//   - a transient error never makes a run restore an older checkpoint
//     than the newest completed one (at start or at a failover);
//   - it never deletes a completed checkpoint retention keeps;
//   - a start or run it fails fails with an error that carries it;
//   - proven damage makes the run fall back to an older checkpoint, and
//     the run says so (a warning naming the checkpoint);
//   - at the end, every word's every count is in the output exactly once.

var (
	faultSeeds = flag.Int("faults.seeds", 0, "number of seeds TestStorageFaults runs (default 200; 20 under -race)")
	faultFirst = flag.Uint64("faults.first", 1, "first seed of TestStorageFaults")
	faultOnly  = flag.Uint64("faults.seed", 0, "run only this seed of TestStorageFaults (with -v, trace it)")
	faultTrace = flag.Bool("faults.trace", false, "trace every seed of TestStorageFaults (with -v)")
)

// defaultFaultSeeds is what TestStorageFaults runs without -faults.seeds.
var defaultFaultSeeds = 200

// violationKind classifies what a seed found.
type violationKind int

const (
	fellBack   violationKind = iota + 1 // restored an older checkpoint than the newest, without damage
	deleted                             // a completed checkpoint retention keeps is gone
	unexpected                          // a run failed with an error no injected fault explains
	refused                             // a start refused, as if every checkpoint were damaged
	gaveUp                              // a fallback from damage failed for good, older checkpoints intact
	silent                              // proven damage was not reported, or not fallen back from
	output                              // output lost or duplicated
	hung                                // a run did not end
)

func (k violationKind) String() string {
	return [...]string{"", "fell back", "deleted", "unexpected error", "refused", "gave up", "silent damage", "output", "hung"}[k]
}

// violation is a property a seed broke.
type violation struct {
	kind violationKind
	seed uint64
	msg  string
}

func (v *violation) Error() string {
	return fmt.Sprintf("seed %d: %s: %s\nreplay: go test ./storage -run 'TestStorageFaults$' -v -args -faults.seed=%d", v.seed, v.kind, v.msg, v.seed)
}

// faultStats is what the seeds exercised.
type faultStats struct {
	runs, kills, startFailures, runFailures, failovers, checkpoints int
	injected, slowed                                                int
	damaged, fellBackOnDamage                                       int
}

func (s *faultStats) add(o faultStats) {
	s.runs += o.runs
	s.kills += o.kills
	s.startFailures += o.startFailures
	s.runFailures += o.runFailures
	s.failovers += o.failovers
	s.checkpoints += o.checkpoints
	s.injected += o.injected
	s.slowed += o.slowed
	s.damaged += o.damaged
	s.fellBackOnDamage += o.fellBackOnDamage
}

const (
	root     = "/ckpt"
	job      = "wordcount"
	retained = 3
	maxRuns  = 6 // runs with faults per seed; then one without, to the end
)

// TestStorageFaults runs -faults.seeds seeds of the generator.
func TestStorageFaults(t *testing.T) {
	n := *faultSeeds
	if n == 0 {
		n = defaultFaultSeeds
	}
	if testing.Short() {
		n = min(n, 20)
	}
	lo, hi := *faultFirst, *faultFirst+uint64(n)
	if *faultOnly != 0 {
		lo, hi = *faultOnly, *faultOnly+1
	}
	var total faultStats
	start := time.Now()
	for seed := lo; seed < hi; seed++ {
		var trace func(string)
		if (*faultOnly != 0 || *faultTrace) && testing.Verbose() {
			trace = func(s string) { t.Log(s) }
		}
		st, err := runFaultSeed(seed, trace)
		if err != nil {
			t.Fatal(err)
		}
		total.add(st)
	}
	t.Logf("%d seeds in %v: %d runs, %d killed, %d failed at start, %d failed later, %d failovers, %d checkpoints completed, %d faults injected, %d slow calls, %d checkpoints damaged on purpose (%d fallbacks seen)",
		hi-lo, time.Since(start).Round(time.Millisecond), total.runs, total.kills, total.startFailures, total.runFailures, total.failovers,
		total.checkpoints, total.injected, total.slowed, total.damaged, total.fellBackOnDamage)
	// The seeds must exercise what they claim to.
	if hi-lo >= 50 && (total.kills == 0 || total.startFailures == 0 || total.failovers == 0 || total.injected == 0 || total.fellBackOnDamage == 0) {
		t.Fatalf("the seeds did not exercise kills, failed starts, failovers and damage: %+v", total)
	}
}

// TestStorageFaultsCatchDefect3 plants defect 3 back (an I/O error reading
// a checkpoint's metadata at start makes it "damaged") and checks that the
// generator catches it: as a fallback, a deleted checkpoint, a start
// refused because every checkpoint looked damaged, or a fallback from
// damaged state given up because every older checkpoint looked damaged.
func TestStorageFaultsCatchDefect3(t *testing.T) {
	racetest.Skip(t)
	storage.PlantDefect3(t)
	// It is caught in about a third of the seeds: three catches are
	// enough, and 200 seeds without one are a generator that lost it.
	const runs, enough = 200, 3
	caught, seeds := 0, 0
	for seed := uint64(1); seed <= runs && caught < enough; seed++ {
		seeds++
		_, err := runFaultSeed(seed, nil)
		if err == nil {
			continue
		}
		var v *violation
		if !errors.As(err, &v) || (v.kind != fellBack && v.kind != deleted && v.kind != refused && v.kind != gaveUp) {
			t.Fatalf("caught, but not as a fallback, a deleted checkpoint, a refused start or a fallback given up: %v", err)
		}
		caught++
	}
	if caught == 0 {
		t.Fatalf("the planted defect 3 survived %d seeds", runs)
	}
	t.Logf("caught in %d of %d seeds", caught, seeds)
}

// words is the vocabulary: large enough that each counting subtask's
// state is a file of its own (above storage.DefaultInlineBytes), so that
// damage can be planted in state files too.
const words = 10000

// runFaultSeed runs one seed: up to maxRuns runs with faults, each killed
// after a few checkpoints unless it fails or finishes, then one run
// without faults to the end; it checks the properties after each.
func runFaultSeed(seed uint64, trace func(string)) (faultStats, error) {
	var st faultStats
	rng := rand.New(rand.NewPCG(seed, 19))
	fail := func(kind violationKind, format string, args ...any) (faultStats, error) {
		return st, &violation{kind: kind, seed: seed, msg: fmt.Sprintf(format, args...)}
	}
	if trace == nil {
		trace = func(string) {}
	}
	data := vfs.NewMem()
	files, err := writeInput(data, rng)
	if err != nil {
		return st, err
	}
	want, err := wordcount.Expected(data, files)
	if err != nil {
		return st, err
	}
	mem := vfs.NewMem()
	f := newFaults(rng.Uint64())
	fs := errorfs.Wrap(mem, f)
	damageChance := []float64{0, 0.1, 0.3}[rng.IntN(3)]
	var damaged checkpoint.ID // a checkpoint with damage planted and not yet dealt with
	for run := 1; ; run++ {
		final := run > maxRuns
		before, err := cleanScan(mem)
		if err != nil {
			return st, err
		}
		// Proven damage, in the newest checkpoint only when an older one
		// is intact to fall back to (with only damaged checkpoints, a
		// start is refused, as TestOnlyDamagedCheckpointsAreRefused
		// checks).
		if latest := latestID(before); damaged == 0 && len(before.Damaged) == 0 && len(before.Completed) >= 2 && rng.Float64() < damageChance {
			d := damage(rng.IntN(4))
			ok, err := plantDamage(mem, mem.PathJoin(root, job, fmt.Sprintf("chk-%d", latest)), d, rng)
			if err != nil {
				return st, err
			}
			if ok {
				damaged = latest
				st.damaged++
				trace(fmt.Sprintf("run %d: planted %s in checkpoint %d", run, d, latest))
				if before, err = cleanScan(mem); err != nil {
					return st, err
				}
			}
		}
		latest := latestID(before)
		// Damaged metadata hides the checkpoint from the newest completed
		// one; damaged state does not.
		metadataDamaged := damaged != 0 && slices.ContainsFunc(before.Damaged, func(d storage.Damaged) bool { return d.ID == damaged })
		if damaged != 0 && !metadataDamaged && latest != damaged {
			damaged = 0 // deleted, or no longer the newest: nothing restores it
		}
		sched := schedules[0]
		if !final {
			sched = schedules[rng.IntN(len(schedules))]
		}
		f.set(sched)
		killAfter := 1 + rng.IntN(4) // completed checkpoints
		if final {
			killAfter = 0
		}
		r := runOnce(data, fs, killAfter, nil)
		f.set(schedules[0])
		f.mu.Lock()
		st.injected, st.slowed = f.injected, f.slowed
		f.mu.Unlock()
		st.runs++
		st.failovers += max(0, len(r.restoredFrom)-1)
		st.checkpoints += len(r.completed)
		trace(fmt.Sprintf("run %d (%s, kill after %d): latest before %d, restored %v, completed %v, err %v", run, sched.name, killAfter, latest, r.restoredFrom, r.completed, r.err))
		for _, rec := range r.logs {
			trace(fmt.Sprintf("  log %s %s checkpoint=%s err=%s", rec.level, rec.msg, rec.checkpoint, rec.err))
		}

		// Which checkpoint each attempt restored: the newest completed,
		// unless proven damage made it fall back.
		point := latest
		fellBackFrom := checkpoint.ID(0)
		for i, from := range r.restoredFrom {
			if i > 0 && len(r.completedBefore[i]) > 0 {
				point = slices.Max(r.completedBefore[i])
			}
			switch {
			case from == point:
			case from < point && point == damaged:
				fellBackFrom, point = damaged, from
			case from < point:
				return fail(fellBack, "run %d (%s), attempt %d restored checkpoint %d, but checkpoint %d is the newest completed and was not damaged on purpose; restored %v, completed %v, err %v",
					run, sched.name, i+1, from, point, r.restoredFrom, r.completed, r.err)
			default:
				return fail(fellBack, "run %d (%s), attempt %d restored checkpoint %d; want %d", run, sched.name, i+1, from, point)
			}
		}
		if len(r.restoredFrom) > 0 && damaged != 0 {
			// The run started: it must have skipped the damaged
			// checkpoint, and said so.
			if metadataDamaged && r.restoredFrom[0] < damaged {
				fellBackFrom = damaged
			}
			failed := r.err != nil && !r.killed && !r.hung
			switch {
			case fellBackFrom != 0:
				if !r.warned(damaged) {
					return fail(silent, "run %d fell back from damaged checkpoint %d without a warning naming it; logs %v", run, damaged, r.logs)
				}
				st.fellBackOnDamage++
			case failed && isInjected(r.err) && len(r.completed) == 0:
				// Transient errors kept it from falling back (the scan
				// for the previous checkpoint, or the deletion of the
				// damaged one, failed every time): the next run will.
			case failed && !isInjected(r.err):
				return fail(gaveUp, "run %d (%s) failed for good over damaged checkpoint %d, with older ones %v intact: %v",
					run, sched.name, damaged, completedIDs(before), r.err)
			default:
				return fail(silent, "run %d: checkpoint %d was damaged on purpose, but no attempt fell back from it: restored %v, completed %v, err %v",
					run, damaged, r.restoredFrom, r.completed, r.err)
			}
		}

		// No checkpoint retention keeps is gone.
		after, err := cleanScan(mem)
		if err != nil {
			return st, err
		}
		keep := completedIDs(before)
		keep = append(keep, r.completed...)
		slices.Sort(keep)
		keep = slices.Compact(keep)
		keep = keep[max(0, len(keep)-retained):]
		have := completedIDs(after)
		for _, id := range keep {
			if id != damaged && !slices.Contains(have, id) {
				return fail(deleted, "run %d (%s) deleted completed checkpoint %d: before %v, completed in the run %v, after %v; err %v",
					run, sched.name, id, completedIDs(before), r.completed, have, r.err)
			}
		}
		if fellBackFrom != 0 || !slices.Contains(have, damaged) {
			damaged = 0
		}

		// Whatever the sink committed so far holds no count twice.
		rep, err := wordcount.Verify(data, "/out", want, false)
		if err != nil {
			return st, err
		}
		if rep.Duplicated > 0 || rep.Unexpected > 0 {
			return fail(output, "after run %d (%s): %v", run, sched.name, rep)
		}

		switch {
		case r.err == nil:
			rep, err := wordcount.Verify(data, "/out", want, false)
			if err != nil {
				return st, err
			}
			if !rep.OK() {
				return fail(output, "after %d runs: %v", run, rep)
			}
			return st, nil
		case r.hung:
			return fail(hung, "run %d (%s) did not end in a minute", run, sched.name)
		case r.killed:
			st.kills++
		case errors.Is(r.err, weir.ErrEarlierRun):
			return fail(refused, "run %d (%s) was refused over checkpoints %v, none damaged on purpose: %v", run, sched.name, completedIDs(before), r.err)
		case final:
			return fail(unexpected, "the run without faults failed: %v", r.err)
		case !isInjected(r.err):
			return fail(unexpected, "run %d (%s) failed with an error no injected fault explains: %v", run, sched.name, r.err)
		case len(r.restoredFrom) == 0:
			st.startFailures++
			// Nothing tells a failed start from a damaged checkpoint but
			// the error's class.
			if storage.ProvenDamage(r.err) {
				return fail(unexpected, "run %d: start failed with a transient error classified as damage: %v", run, r.err)
			}
		default:
			st.runFailures++
		}
	}
}

// writeInput writes two input files of random lines over the vocabulary.
func writeInput(fs vfs.FS, rng *rand.Rand) ([]string, error) {
	if err := fs.MkdirAll("/in", 0o755); err != nil {
		return nil, err
	}
	var files []string
	for i := range 2 {
		var b strings.Builder
		for range 3000 + rng.IntN(3000) {
			fmt.Fprintf(&b, "word-%05d word-%05d w%d\n", rng.IntN(words), rng.IntN(words), rng.IntN(100))
		}
		name := fmt.Sprintf("/in/part-%d.txt", i)
		w, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte(b.String())); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// runResult is what one run did.
type runResult struct {
	err          error
	killed, hung bool
	restoredFrom []checkpoint.ID // per attempt
	// completedBefore[i] are the checkpoints completed before attempt i.
	completedBefore [][]checkpoint.ID
	completed       []checkpoint.ID
	logs            []logRecord
}

// warned reports whether the run logged a warning or an error naming
// checkpoint id.
func (r runResult) warned(id checkpoint.ID) bool {
	return slices.ContainsFunc(r.logs, func(l logRecord) bool { return l.checkpoint == fmt.Sprint(id) })
}

// runOnce runs the word count with restore "latest" over checkpoint
// storage on fs, and cancels it (a kill) after killAfter completed
// checkpoints (0: never). onEvent, if set, hears every event too.
func runOnce(data, fs vfs.FS, killAfter int, onEvent func(weir.JobEvent)) runResult {
	return runOnceAt(data, root, fs, killAfter, onEvent)
}

// runOnceAt is runOnce with the checkpoint storage at dir (on fs, if a
// directory).
func runOnceAt(data vfs.FS, dir string, fs vfs.FS, killAfter int, onEvent func(weir.JobEvent)) runResult {
	var (
		mu sync.Mutex
		r  runResult
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	killCtx, kill := context.WithCancel(ctx)
	defer kill()
	logs := &logRecorder{}
	o := wordcount.Options{
		Input: "/in/*.txt", Output: "/out", FS: data, Parallelism: 2, Restore: "latest",
		Checkpoint: weir.CheckpointConfig{Interval: time.Millisecond, Dir: dir, FS: fs, Retained: retained},
		Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 20},
		Logger:     slog.New(logs),
		OnEvent: func(ev weir.JobEvent) {
			if onEvent != nil {
				onEvent(ev)
			}
			mu.Lock()
			defer mu.Unlock()
			switch ev.Kind {
			case weir.EventRunning:
				r.restoredFrom = append(r.restoredFrom, ev.RestoredFrom)
				r.completedBefore = append(r.completedBefore, slices.Clone(r.completed))
			case weir.EventCheckpointCompleted:
				r.completed = append(r.completed, ev.ID)
				if len(r.completed) == killAfter {
					kill()
				}
			}
		},
	}
	if storage.IsURL(dir) {
		// Checkpoints in S3 take tens of milliseconds: a run must last
		// for several before its input ends.
		o.BeforeCount = wordcount.Paced(10)
	}
	e, err := wordcount.Build(o)
	if err == nil {
		_, err = e.Execute(killCtx)
	}
	mu.Lock()
	defer mu.Unlock()
	r.err = err
	r.hung = ctx.Err() != nil
	r.killed = !r.hung && killCtx.Err() != nil && errors.Is(err, context.Canceled)
	r.logs = logs.all()
	return r
}

// cleanScan is what the checkpoint storage holds, read without faults.
func cleanScan(fs vfs.FS) (storage.Scan, error) {
	d, err := storage.NewDir(fs, root, job, 0)
	if err != nil {
		return storage.Scan{}, err
	}
	return d.Scan()
}

func completedIDs(s storage.Scan) []checkpoint.ID {
	var ids []checkpoint.ID
	for _, m := range s.Completed {
		ids = append(ids, m.ID)
	}
	return ids
}

func latestID(s storage.Scan) checkpoint.ID {
	if m := s.Latest(); m != nil {
		return m.ID
	}
	return 0
}

// logRecorder keeps a run's warnings and errors.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level           slog.Level
	msg, checkpoint string
	err             string
}

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "checkpoint":
			rec.checkpoint = a.Value.String()
		case "err":
			rec.err = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) < 1000 { // a bound: a run that fails often warns often
		l.recs = append(l.recs, rec)
	}
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) all() []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// A fallback from a checkpoint with damaged state deletes it: the sinks
// roll back what they committed after the older checkpoint restored, so
// the damaged one, left in storage, would be restored again at the next
// start (or as the previous of another damaged checkpoint) with its
// output gone ("pending file … is missing: its records are lost", found
// by TestStorageFaults, seed 42).
func TestFallbackDeletesTheDamagedCheckpoint(t *testing.T) {
	data, mem, files, damagedID := withDamagedState(t)
	r := runOnce(data, mem, 1, nil)
	if len(r.restoredFrom) < 2 || r.restoredFrom[0] != damagedID || r.restoredFrom[1] >= damagedID || !r.warned(damagedID) {
		t.Fatalf("restored %v (want %d, then an older one), logs %v", r.restoredFrom, damagedID, r.logs)
	}
	s, err := cleanScan(mem)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(completedIDs(s), damagedID) {
		t.Fatalf("checkpoint %d, damaged and fallen back from, is still there: %v", damagedID, completedIDs(s))
	}
	if r := runOnce(data, mem, 0, nil); r.err != nil {
		t.Fatalf("the last run: %v", r.err)
	}
	checkOutput(t, data, files)
}

// An I/O error while a fallback from damaged state looks for the previous
// checkpoint is not the end of the job: it restarts from the same
// checkpoint and looks again. (It failed the job for good, saying that no
// earlier checkpoint could be used.)
func TestFallbackRetriesAnUnreadableStorage(t *testing.T) {
	data, mem, files, damagedID := withDamagedState(t)
	// The first _metadata read after the first attempt started is the
	// fallback's scan: it fails once.
	var started, failed atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if started.Load() && op.Kind == errorfs.OpOpen && strings.HasSuffix(op.Path, "/"+storage.MetadataFile) && failed.CompareAndSwap(false, true) {
			return &os.PathError{Op: "open", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	}))
	r := runOnce(data, fs, 0, func(ev weir.JobEvent) {
		if ev.Kind == weir.EventRunning {
			started.Store(true)
		}
	})
	if !failed.Load() {
		t.Fatal("no metadata was read after the first attempt started")
	}
	if r.err != nil {
		t.Fatalf("restored %v: %v", r.restoredFrom, r.err)
	}
	if len(r.restoredFrom) < 3 || r.restoredFrom[0] != damagedID || r.restoredFrom[1] != damagedID || r.restoredFrom[2] >= damagedID {
		t.Fatalf("restored %v; want %d twice (the first fallback could not read the storage), then an older one", r.restoredFrom, damagedID)
	}
	checkOutput(t, data, files)
}

// withDamagedState runs the word count, killed, until its newest
// checkpoint has a state file, and truncates it.
func withDamagedState(t *testing.T) (data, mem vfs.FS, files []string, damagedID checkpoint.ID) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 19))
	data, mem = vfs.NewMem(), vfs.NewMem()
	files, err := writeInput(data, rng)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		r := runOnce(data, mem, 2, nil)
		if !r.killed {
			if r.err != nil {
				t.Fatalf("the run failed: %v", r.err)
			}
			// The input ran out first (each run goes on from the last):
			// start over, with new input and no checkpoints.
			data, mem = vfs.NewMem(), vfs.NewMem()
			if files, err = writeInput(data, rng); err != nil {
				t.Fatal(err)
			}
			continue
		}
		s, err := cleanScan(mem)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Completed) < 2 {
			continue
		}
		ok, err := plantDamage(mem, mem.PathJoin(root, job, fmt.Sprintf("chk-%d", latestID(s))), truncateState, rng)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return data, mem, files, latestID(s)
		}
	}
	t.Fatal("no checkpoint with a state file of its own in 10 runs")
	return
}

func checkOutput(t *testing.T, data vfs.FS, files []string) {
	t.Helper()
	want, err := wordcount.Expected(data, files)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := wordcount.Verify(data, "/out", want, false); err != nil || !rep.OK() {
		t.Fatalf("%v, %v", rep, err)
	}
}
