package weir_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/operator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collect is a test sink that keeps what it is given, in memory.
type collect[T any] struct {
	mu  sync.Mutex
	got []T
}

func (c *collect[T]) sink() func() weir.SinkWriter[T] {
	return func() weir.SinkWriter[T] { return &collectWriter[T]{c: c} }
}

func (c *collect[T]) values() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

type collectWriter[T any] struct {
	operator.Base
	c *collect[T]
}

func (w *collectWriter[T]) Write(v T) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.got = append(w.c.got, v)
	return nil
}

func gen[T any](t *testing.T, count int64, mk func(int64) T) func() weir.SourceReader[T] {
	t.Helper()
	g, err := generator.New(generator.Config[T]{Count: count, Make: mk, BatchSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func env(cfg weir.Config) *weir.Environment {
	if cfg.Checkpoint.Interval == 0 {
		cfg.Checkpoint.Interval = 5 * time.Millisecond
	}
	return weir.New(cfg)
}

// jobDeadline bounds a test's run of a job: it catches a stuck job, not a
// slow one. Pebble checks its invariants under -race (a stack trace for
// every file an iterator opens), which makes a Pebble job with 5 ms
// checkpoints 20× slower there than without -race, more on a loaded
// machine.
const jobDeadline = 3 * time.Minute

func execute(t *testing.T, e *weir.Environment) weir.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	res, err := e.Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

type order struct {
	ID, User int64
}

// joiner joins orders with users by user id: it buffers orders until the
// user arrives, then emits "name:order" for every order.
type joiner struct {
	name   *weir.ValueState[int64, string]
	orders *weir.ListState[int64, int64]
}

func (j *joiner) Open(c *weir.KeyedContext[int64]) (err error) {
	if j.name, err = weir.NewValueState[int64, string](c, "name"); err != nil {
		return err
	}
	j.orders, err = weir.NewListState[int64, int64](c, "orders")
	return err
}

func (j *joiner) Process1(_ *weir.KeyedContext[int64], o order, out weir.Collector[string]) error {
	if n, ok := j.name.Value(); ok {
		out.Collect(fmt.Sprintf("%s:%d", n, o.ID))
		return nil
	}
	j.orders.Add(o.ID)
	return nil
}

type named struct {
	ID   int64
	Name string
}

func (j *joiner) Process2(c *weir.KeyedContext[int64], n named, out weir.Collector[string]) error {
	if c.Key() != n.ID {
		return fmt.Errorf("key %d for user %d", c.Key(), n.ID)
	}
	j.name.Update(n.Name)
	for _, id := range j.orders.Get() {
		out.Collect(fmt.Sprintf("%s:%d", n.Name, id))
	}
	j.orders.Clear()
	return nil
}

func TestKeyedJoinOfTwoInputs(t *testing.T) {
	e := env(weir.Config{Parallelism: 2})
	orders := weir.Source(e, "orders", gen(t, 300, func(i int64) order { return order{ID: i, User: i % 17} }))
	users := weir.Source(e, "users", gen(t, 17, func(i int64) int64 { return i }), weir.Parallelism(1))
	names := weir.Map(users, "name", func(u int64) named { return named{u, fmt.Sprint("user", u)} }, weir.Parallelism(1))
	joined := weir.KeyedCoProcess(weir.KeyBy(orders, func(o order) int64 { return o.User }),
		weir.KeyBy(names, func(n named) int64 { return n.ID }), "join",
		func() weir.KeyedCoProcessFunction[int64, order, named, string] { return &joiner{} }, weir.Parallelism(3))
	var c collect[string]
	weir.Sink(joined, "out", c.sink())
	execute(t, e)
	got := c.values()
	slices.Sort(got)
	var want []string
	for i := range int64(300) {
		want = append(want, fmt.Sprintf("user%d:%d", i%17, i))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("join produced %d results, want %d; first %v", len(got), len(want), got[:min(5, len(got))])
	}
}

// sessionCounter counts records per key and parity in MapState and, on the
// first record of a key, sets a timer that is already due: when it fires,
// the key is reported.
type sessionCounter struct {
	byParity *weir.MapState[int64, bool, int64]
	seen     *weir.ValueState[int64, bool]
}

func (s *sessionCounter) Open(c *weir.KeyedContext[int64]) (err error) {
	if s.byParity, err = weir.NewMapState[int64, bool, int64](c, "parity"); err != nil {
		return err
	}
	s.seen, err = weir.NewValueState[int64, bool](c, "seen")
	return err
}

func (s *sessionCounter) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[string]) error {
	n, _ := s.byParity.Get(v%2 == 0)
	s.byParity.Put(v%2 == 0, n+1)
	if _, ok := s.seen.Value(); !ok {
		s.seen.Update(true)
		c.RegisterTimer(c.Now().Add(-time.Millisecond))
	}
	return nil
}

func (s *sessionCounter) OnTimer(c *weir.KeyedContext[int64], _ time.Time, out weir.Collector[string]) error {
	out.Collect(fmt.Sprint("timer:", c.Key()))
	return nil
}

func TestTimersAndMapState(t *testing.T) {
	e := env(weir.Config{Parallelism: 2})
	nums := weir.Source(e, "nums", gen(t, 1000, func(i int64) int64 { return i }))
	fired := weir.Process(weir.KeyBy(nums, func(v int64) int64 { return v % 10 }), "sessions",
		func() weir.KeyedProcessFunction[int64, int64, string] { return &sessionCounter{} })
	var c collect[string]
	weir.Sink(fired, "out", c.sink())
	execute(t, e)
	got := c.values()
	slices.Sort(got)
	if len(got) != 10 || got[0] != "timer:0" || got[9] != "timer:9" {
		t.Fatalf("timers fired %v, want one per key 0..9", got)
	}
}

func TestPartitioningUnionAndReduce(t *testing.T) {
	e := env(weir.Config{Parallelism: 1})
	a := weir.Source(e, "a", gen(t, 100, func(i int64) int64 { return i }))
	b := weir.Source(e, "b", gen(t, 100, func(i int64) int64 { return 1000 + i }))
	both := weir.Union(a, "union", []*weir.Stream[int64]{b})
	spread := weir.Map(weir.Rebalance(both), "spread", func(v int64) int64 { return v }, weir.Parallelism(3))
	type sum struct{ Parity, Total int64 }
	copies := weir.Map(weir.Broadcast(spread), "copies", func(v int64) sum { return sum{v % 2, v} }, weir.Parallelism(2))
	sums := weir.Reduce(weir.KeyBy(copies, func(s sum) int64 { return s.Parity }), "sum",
		func(acc, s sum) sum { return sum{acc.Parity, acc.Total + s.Total} }, weir.Parallelism(2))
	var c collect[sum]
	weir.Sink(sums, "out", c.sink(), weir.Parallelism(2))
	execute(t, e)
	got := c.values()
	// Every record arrives twice (broadcast to two subtasks): 400 running sums.
	if len(got) != 400 {
		t.Fatalf("%d results, want 400", len(got))
	}
	var final, want [2]int64
	for _, s := range got {
		final[s.Parity] = max(final[s.Parity], s.Total) // running sums only grow
	}
	for i := range int64(100) {
		want[i%2] += 2 * (i + 1000 + i)
	}
	if final != want {
		t.Fatalf("totals per parity %v, want %v", final, want)
	}
}

func TestCancelStopsEverything(t *testing.T) {
	checkpointed := make(chan struct{}, 1)
	e2 := weir.New(weir.Config{Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond}, OnEvent: func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			select {
			case checkpointed <- struct{}{}:
			default:
			}
		}
	}})
	nums := weir.Source(e2, "endless", gen(t, 0, func(i int64) int64 { return i }))
	weir.Sink(weir.Filter(nums, "none", func(int64) bool { return false }), "out", (&collect[int64]{}).sink())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e2.Execute(ctx)
		done <- err
	}()
	<-checkpointed
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute after cancel: %v", err)
	}
	// goleak (TestMain) checks that every task and writer goroutine ended.
}

type failing struct{}

func (failing) Process(*weir.KeyedContext[int64], int64, weir.Collector[int64]) error {
	return errors.New("bad record")
}

func TestFailureBeyondRestartAttempts(t *testing.T) {
	e := env(weir.Config{Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 2}})
	nums := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }))
	out := weir.Process(weir.KeyBy(nums, func(v int64) int64 { return v }), "picky",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return failing{} })
	weir.Sink(out, "out", (&collect[int64]{}).sink())
	_, err := e.Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), "picky: bad record") || !strings.Contains(err.Error(), "at most 2 attempts") {
		t.Fatalf("error %v; want the operator, its error and the restart strategy", err)
	}
}

func TestNonDeterministicKeySelectorIsCaught(t *testing.T) {
	e := env(weir.Config{Parallelism: 2, Restart: weir.NoRestart{}})
	nums := weir.Source(e, "nums", gen(t, 1000, func(i int64) int64 { return i }))
	keyed := weir.KeyBy(nums, func(int64) int64 { return rand.Int64() })
	out := weir.Reduce(keyed, "sum", func(a, b int64) int64 { return a + b })
	weir.Sink(out, "out", (&collect[int64]{}).sink())
	_, err := e.Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the key selector must return the same key") {
		t.Fatalf("error %v; want the key selector named", err)
	}
}

func TestInvalidConfigurationFailsAtStart(t *testing.T) {
	aFile := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  weir.Config
		want string
	}{
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: -1}}, "checkpoint interval is -1ns"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Retained: -2}}, "retained checkpoints -2"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second}, Restore: "latest"}, "restore latest needs a checkpoint directory"},
		{weir.Config{Parallelism: 500, Checkpoint: weir.CheckpointConfig{Interval: time.Second}}, "parallelism 500 is outside 1..128"},
		// Unaligned checkpoints (issue 21).
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Mode: weir.AtLeastOnce, Alignment: weir.Unaligned}}, "settings of mode exactly-once, not at-least-once"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, AlignedTimeout: -time.Second}}, "aligned checkpoint timeout -1s is negative"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Alignment: weir.Unaligned, AlignedTimeout: time.Second}}, "with unaligned checkpoints"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second}, BufferDebloat: -time.Second}, "buffer debloat target -1s is negative"},
		// A timeout every checkpoint outlives failed the job over and over,
		// and only the restart strategy ended it (session 35).
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Timeout: time.Millisecond}}, "checkpoint timeout 1ms is below 10ms"},
		// High availability (issue 20).
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{HA: "http://h:2379"}}, "want etcd://host:port"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{HA: "etcd://h:2379", HATTL: 1500 * time.Millisecond}}, "want whole seconds"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second}, Cluster: weir.ClusterConfig{HA: "etcd://h:2379"}}, "--ha needs checkpoint storage that outlives the process"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Fresh: true, Cluster: weir.ClusterConfig{HA: "etcd://h:2379"}}, "--fresh and --restore of a checkpoint do not apply"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Restore: "/tmp/x/job/chk-3", Cluster: weir.ClusterConfig{HA: "etcd://h:2379"}}, "--fresh and --restore of a checkpoint do not apply"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{Role: weir.Coordinator, Certs: "/c", HA: "etcd://h:2379", Listen: "127.0.0.1:0"}}, "--listen needs a fixed host:port"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{Role: weir.Worker, Certs: "/c", HA: "etcd://h:2379", Join: "a:1", Name: "w"}}, "a worker joins the job's coordinators by address"},
		// A worker that listens on loopback and advertises another host
		// is reached by nobody (found by an outside review, session 39).
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{Role: weir.Worker, Certs: "/c", Join: "a:1", Name: "w", Listen: ":7800", Advertise: "192.0.2.7:7800"}}, "listens on loopback (--listen \":7800\") and advertises 192.0.2.7:7800"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/x"}, Cluster: weir.ClusterConfig{Role: weir.Worker, Certs: "/c", Join: "a:1", Name: "w", Advertise: "10.0.0.7:7800"}}, "advertises 10.0.0.7:7800 (--advertise), where other processes cannot reach it"},
		// Local recovery (issue 23).
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second}, LocalRecovery: true, LocalRecoveryDir: "/proc/weir-local"}, "set --local-recovery-dir to a writable directory"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Interval: time.Second}, LocalRecoveryDir: "/tmp/x"}, "local recovery is off: turn it on (--local-recovery)"},
		{weir.Config{Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints}, LocalRecovery: true}, "mode none takes none"},
		// A Pebble directory that cannot be used failed every keyed
		// task's start, restart after restart, naming no setting (found by
		// an outside review, session 39).
		{weir.Config{StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: aFile}}, "set --state-dir (StateBackend.Dir) to a writable directory"},
		{weir.Config{StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: "/proc/weir-state"}}, "set --state-dir (StateBackend.Dir) to a writable directory"},
	} {
		e := weir.New(c.cfg)
		weir.Sink(weir.Source(e, "s", gen(t, 1, func(i int64) int64 { return i })), "out", (&collect[int64]{}).sink())
		if _, err := e.Execute(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestRestoreAtAnotherParallelism stops the word count at parallelism 2
// after two checkpoints and finishes it from the latest checkpoint at
// parallelism 3: keyed state moves by key group, and the committed output is
// still exactly-once.
func TestRestoreAtAnotherParallelism(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for f := range 3 {
		var b strings.Builder
		for i := range 30000 {
			fmt.Fprintf(&b, "w%d w%d\n", i%97, (i*31+f)%89)
		}
		p := filepath.Join(dir, fmt.Sprintf("in-%d.txt", f))
		os.WriteFile(p, []byte(b.String()), 0o644)
		files = append(files, p)
	}
	opts := wordcount.Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		Checkpoint:  weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")},
		BeforeCount: wordcount.Paced(200)} // the first run must outlast two checkpoints
	ctx, cancel := context.WithCancel(context.Background())
	completed := 0
	opts.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if completed++; completed == 2 {
				cancel()
			}
		}
	}
	e, err := wordcount.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v (the input must outlast two checkpoints)", err)
	}
	opts.OnEvent, opts.BeforeCount, opts.Parallelism, opts.Restore = nil, nil, 3, "latest"
	if e, err = wordcount.Build(opts); err != nil {
		t.Fatal(err)
	}
	execute(t, e)
	want, _ := wordcount.Expected(vfs.Default, files)
	rep, err := wordcount.Verify(vfs.Default, opts.Output, want, false)
	if err != nil || !rep.OK() {
		t.Fatalf("after rescaling 2 → 3: %v %v", rep, err)
	}
}

// newRateLimited is a generator of count records at rate per second.
func newRateLimited(rate float64, count int64) (func() weir.SourceReader[int64], error) {
	return generator.New(generator.Config[int64]{Count: count, RatePerSecond: rate, Make: func(i int64) int64 { return i }, BatchSize: 64})
}
