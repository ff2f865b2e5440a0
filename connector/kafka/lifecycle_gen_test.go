package kafka

// The Kafka sink's lifecycles as sequences (issue 19, section E): a seeded
// generator of random sequences of runs (records, checkpoints that complete
// or fail), kill -9, restores of the latest checkpoint, of an older
// retained one and of savepoints, rescales up and down, stops with a
// savepoint and fresh starts, against kfake. After every step the topic,
// read read_committed, must hold exactly the multiset of records a simple
// model says was committed, and after every start no transaction may be
// open (the last stable offsets of the topic and of the ownership topic are
// their ends).
//
// The sink is driven by hand, as the runtime drives it (Open, Write,
// Snapshot and its asynchronous part, NotifyComplete, NotifyAborted):
// hundreds of steps a second, every interleaving reachable, and a kill -9 is
// exact — the writers are dropped without Finish, without a commit or an
// abort; Close only closes their clients' connections, as the process's
// death would (what they had buffered and not sent is lost, what they sent
// stays in open transactions). A whole job (source, checkpoint coordinator)
// would add nothing the sink sees but slowness, and could not stop between
// a checkpoint's completion and its notification at will.
//
// The model, from the README and design notes 9, 14 and 55:
//   - a transaction is committed when a checkpoint at or after its
//     pre-commit completes and its subtask is notified, or when a restore
//     of a checkpoint that records it starts;
//   - a restore (any checkpoint, any parallelism), a fresh start and a
//     start aborts every transaction it does not commit: those are never
//     committed, whatever is restored later;
//   - restoring a checkpoint that records a transaction the model aborted
//     fails for good, saying its records are lost;
//   - committed transactions stay: restoring an older checkpoint or a
//     savepoint repeats what newer ones committed (the source would replay
//     it; here the next records are new ones), and restoring an older
//     checkpoint deletes the newer retained ones;
//   - a run that neither restores nor starts over is refused if anything is
//     committed (defect 4), and changes nothing; Weir refuses it earlier
//     when checkpoints exist, so the generator starts so only without them.
//
// Every completed checkpoint (and the latest one again when a run restores
// it) is also read back as weir verify reads it (Committed): it must hold,
// once each, the records of the transactions its lineage pre-committed up
// to it and did not lose, and every record the runs before its own
// committed since its lineage began (runs after an older checkpoint or
// savepoint that a later run restored, staggered runs, fresh starts);
// nothing else — nothing its own run wrote after it.
//
// go test -run TestKafkaLifecycles -kafkalife.seeds=10000 -kafkalife.first=1
// runs any number; a failing sequence prints its seed and its steps.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/racetest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

var (
	lifeSeeds = flag.Int("kafkalife.seeds", 0, "sequences the Kafka sink lifecycle generator runs (default 24, 4 under -race, where .ci/run also runs the 24 without it, 6 with -short)")
	lifeFirst = flag.Uint64("kafkalife.first", 1, "the lifecycle generator's first seed")
	lifeSteps = flag.Int("kafkalife.steps", 40, "steps per sequence")
)

// lifeSequences is how many sequences TestKafkaLifecycles runs, and among
// how many the planted-bug tests must catch their defect.
func lifeSequences() uint64 {
	switch {
	case *lifeSeeds > 0:
		return uint64(*lifeSeeds)
	case testing.Short():
		return 6
	case raceEnabled:
		return 4
	}
	return lifeDefaultSequences
}

// Bounds of the generated sequences.
const (
	lifeMaxParallelism = 4
	lifeRetained       = 3 // retained checkpoints (--checkpoints-retained)
	lifePool           = 6 // transactional ids per subtask
	// lifeFailedInARow bounds the checkpoints of a run that fail one after
	// another. NB: the pool is a documented bound: each failed checkpoint
	// keeps one more id pre-committed, and a completed one keeps those it
	// recorded from reuse until the next completes (a restore may commit
	// them again), so a subtask needs up to 2 × (failed in a row + 1) ids,
	// and refuses to write beyond (TestKafkaLifecycles found it with 3 ids
	// and 3 failures).
	lifeFailedInARow = (lifePool - 2) / 2
)

type txnState int

const (
	txnOpen      txnState = iota // written to, not pre-committed
	txnPending                   // pre-committed at a snapshot
	txnCommitted                 //
	txnAborted                   // never to be committed
)

// mtxn is the model of one transaction: the records of one subtask between
// two snapshots.
type mtxn struct {
	recs  []string
	sub   int // the subtask that wrote it, in its run's parallelism
	state txnState
	at    checkpoint.ID // pre-committed at
	run   int           // the run that wrote it (lifecycle.runs)
}

// mckpt is a completed checkpoint or savepoint.
type mckpt struct {
	id        checkpoint.ID
	p         int
	handles   []checkpoint.Handle
	recorded  []*mtxn // pending at its snapshot
	savepoint bool
	run       int // the run that took it
}

func (c *mckpt) String() string {
	if c.savepoint {
		return fmt.Sprintf("savepoint %d (parallelism %d)", c.id, c.p)
	}
	return fmt.Sprintf("checkpoint %d (parallelism %d)", c.id, c.p)
}

// msub is a running subtask: its writer and the model of its transactions.
type msub struct {
	w       weir.SinkWriter[string]
	open    *mtxn
	pending []*mtxn
}

// lifecycle is one sequence: the broker, the run (if any) and the model.
type lifecycle struct {
	rng     *rand.Rand
	seed    uint64
	brokers []string
	adm     *kadm.Client // for the checks
	mem     *operatortest.MemWriter
	run     *operatortest.Run
	subs    []*msub // nil: no run
	all     []*mtxn
	// committed counts the records of committed transactions.
	committed  map[string]int
	retained   []*mckpt
	savepoints []*mckpt
	next       checkpoint.ID
	records    int
	steps      []string
	// kinds counts the steps taken by kind, for the test's log.
	kinds map[string]int
	// failedInARow counts the run's checkpoints that failed since its
	// last completed one.
	failedInARow int
	// clients is what the sink's Kafka clients logged, with the steps
	// between, for a failing sequence's report.
	clients *clientLog
	// runs counts the runs opened (staggered ones too); restored is the
	// checkpoint each run restored, nil for a start from nothing; last is
	// the checkpoint or savepoint completed last, until a run starts from
	// another.
	runs     int
	restored map[int]*mckpt
	last     *mckpt
}

func (l *lifecycle) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.kinds[kindOf(msg)]++
	l.steps = append(l.steps, fmt.Sprintf("%d: %s", len(l.steps)+1, msg))
	fmt.Fprintf(l.clients, "%s step %s\n", time.Now().Format("15:04:05.000000"), l.steps[len(l.steps)-1])
}

// clientLog keeps what the sink's clients log (kgo's info level: producer
// ids, transactions begun and ended, with epochs; and its debug messages
// about transactions). A failing sequence
// writes it to a file its report names.
type clientLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *clientLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *clientLog) opt() kgo.Opt { return kgo.WithLogger(c) }

// Level asks for debug messages, of which Log keeps those about
// transactions (kgo says at debug level when EndTransaction ends nothing).
func (c *clientLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (c *clientLog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelDebug && !strings.Contains(msg, "transaction") {
		return
	}
	fmt.Fprintf(c, "%s [%s] %s %v\n", time.Now().Format("15:04:05.000000"), level, msg, keyvals)
}

// repaired counts the transactions the sink committed by producer id and
// epoch because their client ended them without committing (design note
// 70).
func (c *clientLog) repaired() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Count(c.b.Bytes(), []byte("ended a transaction without committing it"))
}

// save writes the log to a file in dir (the system's temporary directory
// if empty) and returns its name, or why not.
func (c *clientLog) save(dir string, seed uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.CreateTemp(dir, fmt.Sprintf("weir-kafka-lifecycle-%d-*.log", seed))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Write(c.b.Bytes()); err != nil {
		return err.Error()
	}
	return f.Name()
}

// kindOf names the kind of a step from its description.
func kindOf(msg string) string {
	f := strings.Fields(strings.NewReplacer(",", "", ";", "").Replace(msg))
	switch {
	case f[0] == "restore" || f[0] == "refused":
		return f[0] + " " + f[1]
	case f[0] == "checkpoint" && len(f) > 3:
		return "checkpoint completes, some notified"
	case f[0] == "checkpoint":
		return "checkpoint " + f[2]
	case f[0] == "start" && f[1] == "fresh":
		return "start fresh"
	}
	return f[0]
}

// runLifecycle runs the sequence of seed, returning the first departure
// from the model.
func runLifecycle(seed uint64, steps int) (l *lifecycle, err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	l = &lifecycle{adm: kadm.NewClient(cl), rng: rand.New(rand.NewPCG(seed, 0x6b61666b61)), seed: seed, brokers: c.ListenAddrs(),
		mem: &operatortest.MemWriter{}, committed: map[string]int{}, next: 1, kinds: map[string]int{}, clients: &clientLog{}, restored: map[int]*mckpt{}}
	defer l.kill()
	for range steps {
		if err := l.step(); err != nil {
			return l, err
		}
	}
	return l, nil
}

// step takes one random step and checks the model.
func (l *lifecycle) step() error {
	r := l.rng.IntN(100)
	if l.subs != nil {
		switch {
		case r < 40:
			return l.write()
		case r < 65:
			return l.checkpoint(true, len(l.subs))
		case r < 73 && l.failedInARow < lifeFailedInARow:
			l.failedInARow++
			return l.checkpoint(false, 0)
		case r < 73:
			return l.checkpoint(true, len(l.subs))
		case r < 80:
			// Complete a checkpoint, notify some subtasks, die.
			if err := l.checkpoint(true, l.rng.IntN(len(l.subs))); err != nil {
				return err
			}
			l.logf("kill -9")
			l.kill()
			return l.check()
		case r < 90:
			l.logf("kill -9")
			l.kill()
			return l.check()
		default:
			return l.stopWithSavepoint()
		}
	}
	p := 1 + l.rng.IntN(lifeMaxParallelism)
	switch {
	case r < 35 && len(l.retained) > 0:
		return l.restore(l.retained[len(l.retained)-1], p, "latest")
	case r < 50 && len(l.retained) > 1:
		i := l.rng.IntN(len(l.retained) - 1)
		c := l.retained[i]
		l.retained = l.retained[:i+1] // Weir deletes the newer ones
		return l.restore(c, p, "older")
	case r < 70 && len(l.savepoints) > 0:
		return l.restore(l.savepoints[l.rng.IntN(len(l.savepoints))], p, "savepoint")
	case r >= 70 && r < 78 && (len(l.committed) == 0 || r%2 == 0):
		// NB: plain only where it would not be refused: subtask 0 alone
		// looks, and the subtasks before it would have written.
		return l.staggered(p, len(l.committed) > 0)
	case r < 85 && len(l.retained) == 0:
		return l.start(p, false)
	}
	return l.start(p, true)
}

// staggered runs a whole run at least once, plain over a topic without
// committed output or fresh, whose subtasks open one after another in a
// random order: each writes a few records, flushes them at the end of its
// input, and closes before the next opens. What the subtasks before it
// wrote is this run's, not an earlier run's: subtask 0 must not refuse the
// run for it (issue 19, leftover 1 of the second session). The run takes
// no checkpoint and aborts no transaction, so the transactions earlier
// runs left open stay so.
// errStaggeredRefused marks a staggered run refused for an earlier run's
// output, of which the topic holds none but this run's.
var errStaggeredRefused = errors.New("a staggered run was refused for its own output")

func (l *lifecycle) staggered(p int, fresh bool) error {
	order := l.rng.Perm(p)
	kind := "plain"
	if fresh {
		kind, l.retained = "fresh", nil // --fresh deletes the checkpoints, not the savepoints
	}
	l.logf("staggered %s run at least once, at parallelism %d: subtasks %v open one after another, each writing, flushing at its end and closing before the next opens", kind, p, order)
	newSink, err := Sink(SinkConfig[string]{Brokers: l.brokers, Topic: "out", Encode: encode, Delivery: AtLeastOnce})
	if err != nil {
		return fmt.Errorf("build the sink: %w", err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	l.runs++
	l.last = nil
	for _, sub := range order {
		ctx := run.Context("out", sub, p, nil)
		ctx.StartOver = fresh
		t := &mtxn{sub: sub, state: txnCommitted, run: l.runs}
		l.all = append(l.all, t)
		w := newSink()
		if err := w.Open(ctx); err != nil {
			w.Close()
			if errors.Is(err, ErrEarlierOutput) {
				err = fmt.Errorf("%w: %w", errStaggeredRefused, err)
			}
			return fmt.Errorf("subtask %d: %w", sub, err)
		}
		for range 1 + l.rng.IntN(3) {
			l.records++
			v := fmt.Sprintf("r%d", l.records)
			if err := w.Write(v); err != nil {
				w.Close()
				return fmt.Errorf("write %s through subtask %d: %w", v, sub, err)
			}
			l.committed[v]++
			t.recs = append(t.recs, v)
		}
		err := w.Finish()
		w.Close()
		if err != nil {
			return fmt.Errorf("subtask %d: finish: %w", sub, err)
		}
	}
	return l.check()
}

// open opens a run of p subtasks, from c or from nothing; it stops at the
// first subtask that refuses and closes the others.
func (l *lifecycle) open(p int, c *mckpt, fresh bool) (failed int, err error) {
	l.run = &operatortest.Run{Logger: slog.New(slog.NewTextHandler(l.clients, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	newSink, err := Sink(SinkConfig[string]{Brokers: l.brokers, Topic: "out", Encode: encode, TransactionalIDs: lifePool, ClientOpts: []kgo.Opt{l.clients.opt()}})
	if err != nil {
		return 0, fmt.Errorf("build the sink: %w", err)
	}
	var subs []*msub
	for sub := range p {
		var r *operator.Restore
		if c != nil {
			r = &operator.Restore{Checkpoint: c.id, Handles: c.handles, Read: l.mem.Read}
		}
		ctx := l.run.Context("out", sub, p, r)
		ctx.StartOver = fresh
		w := newSink()
		if err := w.Open(ctx); err != nil {
			w.Close()
			for _, s := range subs {
				s.w.Close()
			}
			l.run.Close()
			return sub, err
		}
		subs = append(subs, &msub{w: w})
	}
	l.subs, l.failedInARow = subs, 0
	l.runs++
	l.restored[l.runs] = c
	if c != l.last {
		l.last = nil
	}
	return 0, nil
}

// abortRest marks every transaction not committed as never to be.
func (l *lifecycle) abortRest() {
	for _, t := range l.all {
		if t.state != txnCommitted {
			t.state = txnAborted
		}
	}
}

func (l *lifecycle) commit(t *mtxn) {
	if t.state == txnCommitted {
		return
	}
	if t.state == txnAborted {
		panic("kafka lifecycle: the model commits an aborted transaction")
	}
	t.state = txnCommitted
	for _, r := range t.recs {
		l.committed[r]++
	}
}

// restore restores c at parallelism p.
func (l *lifecycle) restore(c *mckpt, p int, how string) error {
	l.logf("restore %s, %v, at parallelism %d", how, c, p)
	// Subtask s commits the recorded transactions of the subtasks s, s+p, ...
	// and fails if one of them is aborted.
	lost := -1
	for s := 0; s < p && lost < 0; s++ {
		for _, t := range c.recorded {
			if t.sub%p == s && t.state == txnAborted {
				lost = s
			}
		}
	}
	failed, err := l.open(p, c, false)
	switch {
	case lost >= 0 && err == nil:
		return fmt.Errorf("the restore went on, though %v records a transaction of subtask %d that an earlier start aborted: its records are lost", c, lost)
	case lost >= 0 && (failed != lost || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "its records are lost")):
		return fmt.Errorf("subtask %d: %v (permanent: %v), want subtask %d to fail for good saying the records are lost", failed, err, operator.IsPermanent(err), lost)
	case lost >= 0:
		l.logf("refused as it should: %v records a transaction an earlier start aborted", c)
		// Subtasks up to the refusing one committed their share; the
		// next start aborts the rest, and fresh is the way on.
		for _, t := range c.recorded {
			if t.sub%p <= lost && t.state == txnPending {
				l.commit(t)
			}
		}
		l.retained = nil
		return l.start(1+l.rng.IntN(lifeMaxParallelism), true)
	case err != nil:
		return fmt.Errorf("subtask %d: %w", failed, err)
	}
	for _, t := range c.recorded {
		l.commit(t)
	}
	l.abortRest()
	if err := l.checkStart(); err != nil {
		return err
	}
	if c != l.last {
		return nil // later runs wrote after it: verify would read a later one
	}
	return l.checkReadBack(c)
}

// start starts from nothing: over (fresh), or plainly, which is refused
// if anything is committed.
func (l *lifecycle) start(p int, fresh bool) error {
	if fresh {
		l.logf("start fresh at parallelism %d", p)
		l.retained = nil // --fresh deletes the checkpoints, not the savepoints
	} else {
		l.logf("start at parallelism %d, without --restore or --fresh", p)
	}
	_, err := l.open(p, nil, fresh)
	refuse := !fresh && len(l.committed) > 0
	switch {
	case refuse && err == nil:
		return errors.New("the start went on, though the topic holds output an earlier run committed")
	case refuse && (!errors.Is(err, ErrEarlierOutput) || !operator.IsPermanent(err)):
		return fmt.Errorf("%v, want a permanent refusal for an earlier run's output", err)
	case refuse:
		return l.check() // and it changed nothing
	case err != nil:
		return err
	}
	l.abortRest()
	return l.checkStart()
}

// write writes a few records, each through a random subtask.
func (l *lifecycle) write() error {
	n := 1 + l.rng.IntN(6)
	var subs []int
	for range n {
		sub := l.rng.IntN(len(l.subs))
		s := l.subs[sub]
		l.records++
		v := fmt.Sprintf("r%d", l.records)
		if err := s.w.Write(v); err != nil {
			return fmt.Errorf("write %s through subtask %d: %w", v, sub, err)
		}
		if s.open == nil {
			s.open = &mtxn{sub: sub, run: l.runs}
			l.all = append(l.all, s.open)
		}
		s.open.recs = append(s.open.recs, v)
		subs = append(subs, sub)
	}
	l.logf("write %d records through subtasks %v", n, subs)
	return nil
}

// checkpoint takes the next checkpoint: every subtask's snapshot and, if
// it completes, every asynchronous part; notified of its completion are the
// first notify subtasks. A checkpoint that fails runs some asynchronous
// parts and is aborted.
func (l *lifecycle) checkpoint(complete bool, notify int) error {
	_, err := l.takeCheckpoint(complete, notify, false)
	return err
}

// takeCheckpoint is checkpoint, or a savepoint, which is not retained as a
// checkpoint.
func (l *lifecycle) takeCheckpoint(complete bool, notify int, savepoint bool) (*mckpt, error) {
	id := l.next
	l.next++
	var asyncs []operator.Async
	var recorded []*mtxn
	for sub, s := range l.subs {
		a, err := s.w.Snapshot(id)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: snapshot of subtask %d: %w", id, sub, err)
		}
		if s.open != nil {
			s.open.state, s.open.at = txnPending, id
			s.pending = append(s.pending, s.open)
			s.open = nil
		}
		recorded = append(recorded, s.pending...)
		asyncs = append(asyncs, a)
	}
	var handles []checkpoint.Handle
	for sub, a := range asyncs {
		if !complete && l.rng.IntN(2) == 0 {
			continue
		}
		hs, err := a(l.mem)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: asynchronous part of subtask %d: %w", id, sub, err)
		}
		handles = append(handles, hs...)
	}
	if !complete {
		l.logf("checkpoint %d fails", id)
		for _, s := range l.subs {
			s.w.NotifyAborted(id)
		}
		return nil, l.check()
	}
	l.failedInARow = 0
	c := &mckpt{id: id, p: len(l.subs), handles: handles, recorded: recorded, savepoint: savepoint, run: l.runs}
	if !savepoint {
		l.retained = append(l.retained, c)
		if len(l.retained) > lifeRetained {
			l.retained = slices.Delete(l.retained, 0, 1)
		}
	}
	if notify < len(l.subs) {
		l.logf("checkpoint %d completes; %d of %d subtasks are notified", id, notify, len(l.subs))
	} else {
		l.logf("checkpoint %d completes", id)
	}
	for sub, s := range l.subs[:notify] {
		if err := s.w.NotifyComplete(id); err != nil {
			return nil, fmt.Errorf("checkpoint %d: notify subtask %d: %w", id, sub, err)
		}
		for _, t := range s.pending {
			l.commit(t) // all pre-committed at or before id
		}
		s.pending = nil
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	l.last = c
	return c, l.checkReadBack(c)
}

// stopWithSavepoint takes a savepoint, commits it and stops the run.
func (l *lifecycle) stopWithSavepoint() error {
	sp, err := l.takeCheckpoint(true, len(l.subs), true)
	if err != nil {
		return err
	}
	l.savepoints = append(l.savepoints, sp)
	l.logf("stop with %v", sp)
	l.kill()
	return l.check()
}

// kill drops the run: no Finish, no commit, no abort.
func (l *lifecycle) kill() {
	for _, s := range l.subs {
		s.w.Close()
		if s.open != nil {
			s.open.state = txnAborted // no checkpoint records it
		}
	}
	if l.run != nil {
		l.run.Close()
	}
	l.subs, l.run = nil, nil
}

// checkStart checks that no transaction is open once a run has started,
// then what is committed.
func (l *lifecycle) checkStart() error {
	deadline := time.Now().Add(2 * time.Second) // abort markers are written just after the abort
	for {
		open, err := openTransactions(l.adm, "out", OwnersTopic)
		if err != nil {
			return err
		}
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after the start, transactions hold read_committed readers back at %v (last stable offset below the high watermark)", open)
		}
		time.Sleep(20 * time.Millisecond) // polling for the markers
	}
	return l.check()
}

// check compares what the topic holds read_committed with the model,
// waiting up to 5 s for a commit's markers to reach every partition. NB: a
// transaction still open (pre-committed, its subtask not notified yet, or
// left by a kill until the next start) hides what was committed after it
// in its partition: then only what is visible is checked, to be no more
// than the model says (nothing uncommitted, nothing twice); every start
// checks all. But while a run goes on whose every transaction the model
// holds committed (or aborted by its start), none may be open: a commit
// that answered success without committing shows here, at its checkpoint,
// rather than as records lost at the next start.
func (l *lifecycle) check() error {
	deadline := time.Now().Add(5 * time.Second)
	quiet := l.subs != nil && !slices.ContainsFunc(l.all, func(t *mtxn) bool { return t.state == txnOpen || t.state == txnPending })
	for {
		open, err := openTransactions(l.adm, "out")
		if err != nil {
			return err
		}
		got, err := readCommitted(l.brokers, "out")
		if err != nil {
			return err
		}
		if len(open) == 0 && maps.Equal(got, l.committed) || len(open) > 0 && !quiet && within(got, l.committed) {
			return nil
		}
		if time.Now().After(deadline) {
			if len(open) > 0 && quiet {
				return fmt.Errorf("every transaction of the run is committed (read_committed holds %s), but read_committed readers are held back at %v", orNothingElse(diffCounts(got, l.committed)), open)
			}
			if len(open) > 0 {
				return fmt.Errorf("read_committed holds %s, more than the model says is committed (while transactions are open at %v)", diffCounts(got, l.committed), open)
			}
			return fmt.Errorf("read_committed holds %s", diffCounts(got, l.committed))
		}
		time.Sleep(20 * time.Millisecond) // polling for the markers
	}
}

// checkReadBack reads c back as weir verify does and checks it against the
// model (see the top of the file).
func (l *lifecycle) checkReadBack(c *mckpt) error {
	lineage := map[*mtxn]bool{}
	root := c.run // the run that began c's lineage, from nothing
	for run, at := c.run, c.id; ; {
		root = run
		for _, t := range l.all {
			if t.run == run && t.at != 0 && t.at <= at {
				lineage[t] = true
			}
		}
		r := l.restored[run]
		if r == nil {
			break
		}
		run, at = r.run, r.id
	}
	want := map[string]int{}
	for _, t := range l.all {
		if lineage[t] && t.state != txnAborted || !lineage[t] && t.run >= root && t.run < c.run && t.state == txnCommitted {
			for _, v := range t.recs {
				want[v]++
			}
		}
	}
	newSink, err := Sink(SinkConfig[string]{Brokers: l.brokers, Topic: "out", Encode: encode, TransactionalIDs: lifePool})
	if err != nil {
		return err
	}
	got := map[string]int{}
	err = newSink().(weir.VerifiedSink[string]).Committed((&operatortest.Run{}).Context("out", 0, 1, &operator.Restore{Checkpoint: c.id, Handles: c.handles, Read: l.mem.Read}), func(rec []byte) {
		v, err := strconv.Unquote(strings.TrimPrefix(string(rec), "out null "))
		if err != nil {
			v = string(rec)
		}
		got[v]++
	})
	if err != nil {
		return fmt.Errorf("read back %v: %w", c, err)
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("read back as verify reads it, %v holds %s", c, diffCounts(got, want))
	}
	return nil
}

// orNothingElse is a difference of counts, or says there is none.
func orNothingElse(diff string) string {
	if diff == "" {
		return "what the model says"
	}
	return diff
}

// within reports whether got counts no record more often than want.
func within(got, want map[string]int) bool {
	for k, n := range got {
		if n > want[k] {
			return false
		}
	}
	return true
}

// diffCounts says which records got and want count differently.
func diffCounts(got, want map[string]int) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if got[k] != want[k] {
			d = append(d, fmt.Sprintf("%s ×%d (want ×%d)", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("%s ×0 (want ×%d)", k, want[k]))
		}
	}
	return strings.Join(d, ", ")
}

// openTransactions returns the partitions of topics whose last stable
// offset is below their high watermark.
func openTransactions(adm *kadm.Client, topics ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	end, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = end.Error()
	}
	if err != nil {
		return nil, err
	}
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, err
	}
	var open []string
	end.Each(func(o kadm.ListedOffset) {
		if s, ok := stable.Lookup(o.Topic, o.Partition); !ok || s.Offset < o.Offset {
			open = append(open, fmt.Sprintf("%s/%d", o.Topic, o.Partition))
		}
	})
	return open, nil
}

// readCommitted reads topic read_committed up to its last stable offsets
// and counts the values.
func readCommitted(brokers []string, topic string) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	pos := map[int32]int64{}
	done := func() bool {
		all := true
		ends.Each(func(o kadm.ListedOffset) {
			if pos[o.Partition] < o.Offset {
				all = false
			}
		})
		return all
	}
	got := map[string]int{}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s read_committed: %w (at %v of %v)", topic, err, pos, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				got[string(r.Value)]++
			}
		})
	}
	return got, nil
}

// lifeFailure describes a failed sequence so that it can be replayed. The
// sink's clients' log is saved in dir: "" (the system's temporary
// directory, kept) for a failure, a test's own directory for a departure
// a planted defect was meant to cause.
func lifeFailure(dir string, seed uint64, l *lifecycle, err error) string {
	var steps []string
	if l != nil {
		steps = l.steps
	}
	var clients string
	if l != nil {
		clients = "\nthe sink's clients logged, between the steps: " + l.clients.save(dir, seed)
	}
	return fmt.Sprintf("seed %d (replay: go test -run TestKafkaLifecycles ./connector/kafka -kafkalife.first=%d -kafkalife.seeds=1 -kafkalife.steps=%d): %v\nsteps:\n  %s%s",
		seed, seed, *lifeSteps, err, strings.Join(steps, "\n  "), clients)
}

// TestKafkaLifecycles runs -kafkalife.seeds sequences from -kafkalife.first.
// Every failing seed is reported, up to 10.
func TestKafkaLifecycles(t *testing.T) {
	kinds := map[string]int{}
	failed, repaired := 0, 0
	for i := range lifeSequences() {
		seed := *lifeFirst + i
		if i > 0 && i%100 == 0 && lifeSequences() >= 1000 {
			t.Logf("%d sequences run, %d failed", i, failed)
		}
		l, err := runLifecycle(seed, *lifeSteps)
		if err != nil {
			t.Error(lifeFailure("", seed, l, err))
			if failed++; failed == 10 {
				t.Fatalf("stopped after %d of %d sequences at the 10th failure", i+1, lifeSequences())
			}
			continue
		}
		for k, n := range l.kinds {
			kinds[k] += n
		}
		if n := l.clients.repaired(); n > 0 {
			repaired += n
			t.Logf("seed %d: the sink committed %d transactions its client ended without committing", seed, n)
		}
	}
	var ks []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		ks = append(ks, fmt.Sprintf("%q %d", k, kinds[k]))
	}
	t.Logf("%d sequences from seed %d, %d failed; the sink committed %d transactions its client ended without committing; steps of the others by kind: %s", lifeSequences(), *lifeFirst, failed, repaired, strings.Join(ks, ", "))
}

// lifeDefaultSequences is how many sequences TestKafkaLifecycles runs by
// default, without -race or -short.
const lifeDefaultSequences = 24

// caughtAs returns the first of the default sequences (seeds 1 to
// lifeDefaultSequences, under -race and -short too) that departs from the
// model, with planted set, in the way caught says, and the departure. A
// sequence that departs in another way is logged and replayed without the
// planted defect: one that fails then too is an error of its own. NB: a
// planted defect can make a sequence depart in more than one way, and
// which one comes first can depend on timing (a loaded machine).
func caughtAs(t *testing.T, planted *atomic.Bool, caught func(error) bool) (uint64, *lifecycle, error) {
	t.Helper()
	for seed := uint64(1); seed <= lifeDefaultSequences; seed++ {
		planted.Store(true)
		l, err := runLifecycle(seed, *lifeSteps)
		planted.Store(false)
		if err == nil {
			continue
		}
		if caught(err) {
			return seed, l, err
		}
		t.Logf("with the planted defect, another departure: %s", lifeFailure(t.TempDir(), seed, l, err))
		if l, err := runLifecycle(seed, *lifeSteps); err != nil {
			t.Errorf("and without it too: %s", lifeFailure("", seed, l, err))
		}
	}
	return 0, nil, nil
}

// TestKafkaLifecyclesCatchDefect9: with a restore that fails when the
// broker refuses a recorded transaction's commit for a newer epoch (a
// savepoint restores once), some default sequence fails so.
func TestKafkaLifecyclesCatchDefect9(t *testing.T) {
	racetest.Skip(t)
	seed, l, err := caughtAs(t, &plantedDefect9, func(err error) bool { return errors.Is(err, errEpochGone) })
	if err == nil {
		t.Fatal("no sequence of the default seeds caught planted defect 9 as a restore refused for a newer epoch")
	}
	t.Logf("caught: %s", lifeFailure(t.TempDir(), seed, l, err))
}

// TestKafkaLifecyclesCatchDefect10: with a restore that aborts only the ids
// up to the recorded parallelism and pool size, some default sequence
// leaves a transaction open after a start.
func TestKafkaLifecyclesCatchDefect10(t *testing.T) {
	racetest.Skip(t)
	seed, l, err := caughtAs(t, &plantedDefect10, func(err error) bool {
		return strings.Contains(err.Error(), "transactions hold read_committed readers back")
	})
	if err == nil {
		t.Fatal("no sequence of the default seeds caught planted defect 10 as a transaction left open after a start")
	}
	t.Logf("caught: %s", lifeFailure(t.TempDir(), seed, l, err))
}

// TestKafkaLifecyclesCatchSiblingTakenForEarlierRun: with every committed
// ownership record taken for an earlier run's (no run ids), some default
// sequence has a staggered run refused for its own subtasks' output.
func TestKafkaLifecyclesCatchSiblingTakenForEarlierRun(t *testing.T) {
	racetest.Skip(t)
	seed, l, err := caughtAs(t, &plantedNoRunID, func(err error) bool { return errors.Is(err, errStaggeredRefused) })
	if err == nil {
		t.Fatal("no sequence of the default seeds caught records told apart without run ids as a staggered run refused for an earlier run's output")
	}
	t.Logf("caught: %s", lifeFailure(t.TempDir(), seed, l, err))
}

// TestKafkaLifecyclesCatchStartsDropped: with a restore that forgets where
// the lineage's output began, some default sequence reads a checkpoint back
// with what an earlier lineage committed.
func TestKafkaLifecyclesCatchStartsDropped(t *testing.T) {
	racetest.Skip(t)
	seed, l, err := caughtAs(t, &plantedStartsDropped, func(err error) bool {
		return strings.Contains(err.Error(), "read back as verify reads it")
	})
	if err == nil {
		t.Fatal("no sequence of the default seeds caught the lineage's starts dropped at a restore as a checkpoint read back with an earlier lineage's output")
	}
	t.Logf("caught: %s", lifeFailure(t.TempDir(), seed, l, err))
}
