package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

func newStateBench() *cobra.Command {
	var keys count = 50_000_000
	var change float64
	var updates, parallelism, valueBytes int
	var interval time.Duration
	var backend, stateDir, ckptDir string
	var incremental bool
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Load a keyed count with many distinct keys, then change a share of them per checkpoint interval; report checkpoint cost",
		Long: `Count per key over --keys distinct keys: first every key once, as fast as the job
goes (the load), then --change of the keys per --checkpoint-interval for --updates
intervals. Prints the load's keys per CPU-second, and per checkpoint its state size,
the bytes it uploaded (an incremental checkpoint uploads what changed) and its
synchronous part; then the peak resident memory. Run it with GOMEMLIMIT to show
state larger than memory: GOMEMLIMIT=1GiB weir bench state --state-backend pebble.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case keys < 1:
				return fmt.Errorf("--keys %d: must be at least 1", keys)
			case change <= 0 || change > 1:
				return fmt.Errorf("--change %v: want a share of the keys above 0, at most 1", change)
			case updates < 1 || parallelism < 1 || interval <= 0 || valueBytes < 0:
				return errors.New("--updates, --parallelism and --checkpoint-interval must be above 0, --value-bytes not negative")
			}
			sb, err := stateBackend(cmd, backend, stateDir, incremental)
			if err != nil {
				return err
			}
			if ckptDir == "" {
				if ckptDir, err = os.MkdirTemp("", "weir-state-bench-"); err != nil {
					return err
				}
				defer os.RemoveAll(ckptDir)
			}
			perInterval := int64(math.Ceil(float64(keys) * change))
			src := &keySource{keys: int64(keys), updates: perInterval * int64(updates), rate: float64(perInterval) / interval.Seconds()}
			var mu sync.Mutex
			var events []weir.JobEvent
			var updating []bool // per event: triggered after the load
			env := weir.New(weir.Config{Job: "state-bench", Parallelism: parallelism, Fresh: true, StateBackend: sb,
				Checkpoint: weir.CheckpointConfig{Interval: interval, Dir: ckptDir, DiscardOnCancel: true},
				OnEvent: func(e weir.JobEvent) {
					if e.Kind == weir.EventCheckpointCompleted {
						loaded, _, ok := src.loaded()
						mu.Lock()
						events = append(events, e)
						updating = append(updating, ok && loaded.Before(time.Now().Add(-e.Duration)))
						mu.Unlock()
					}
				}})
			keyed := weir.KeyBy(weir.Source(env, "keys", func() weir.SourceReader[int64] { return src.reader() }), func(k int64) int64 { return k })
			counts := weir.Process(keyed, "count", func() weir.KeyedProcessFunction[int64, int64, int64] { return &keyCount{pad: valueBytes} })
			weir.Sink(counts, "none", weir.SinkFunc(func(int64) error { return nil }))
			limit := debug.SetMemoryLimit(-1)
			fmt.Fprintf(os.Stderr, "weir: %d keys (%d bytes of state each), then %.2g%% of them (%d) per %v for %d intervals; state backend %s; parallelism %d; memory limit %s; %d CPUs\n",
				keys, 8+valueBytes, change*100, perInterval, interval, updates, backend, parallelism, memLimit(limit), runtime.NumCPU())
			stop, err := startProfile()
			if err != nil {
				return err
			}
			defer stop()
			cpu0, _ := cpuTime()
			start := time.Now()
			res, err := env.Execute(cmd.Context())
			if err != nil {
				return err
			}
			wall := time.Since(start)
			cpu1, _ := cpuTime()
			var ru syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			loaded, loadCPU, _ := src.loaded()
			fmt.Printf("load: %d keys in %.1fs, %s keys per CPU-second\n", keys, loaded.Sub(start).Seconds(), si(float64(keys)/(loadCPU-cpu0).Seconds()))
			fmt.Printf("run: %.1fs, %.2f cores, %d checkpoints\n", wall.Seconds(), (cpu1-cpu0).Seconds()/wall.Seconds(), res.Checkpoints)
			fmt.Println("checkpoint  phase    state      uploaded  share  duration  sync part")
			var syncs, durations []time.Duration
			var shares []float64
			for i, e := range events {
				phase := "load"
				if updating[i] {
					phase = "update"
					syncs = append(syncs, e.SyncPart)
					durations = append(durations, e.Duration)
					shares = append(shares, float64(e.Uploaded)/float64(e.Size))
				}
				fmt.Printf("%10d  %-6s  %9s  %9s  %4.1f%%  %8v  %v\n", e.ID, phase, byteSize(e.Size), byteSize(e.Uploaded), 100*float64(e.Uploaded)/float64(max(e.Size, 1)), e.Duration.Round(time.Millisecond), e.SyncPart.Round(100*time.Microsecond))
			}
			if len(syncs) > 0 {
				slices.Sort(syncs)
				slices.Sort(durations)
				slices.Sort(shares)
				p := func(ds []time.Duration, q float64) time.Duration { return ds[min(len(ds)-1, int(float64(len(ds))*q))] }
				fmt.Printf("update checkpoints: uploaded %.1f%%–%.1f%% of the state (median %.1f%%); duration p50 %v, p99 %v; synchronous part p50 %v, p99 %v\n",
					100*shares[0], 100*shares[len(shares)-1], 100*shares[len(shares)/2], p(durations, 0.5).Round(time.Millisecond), p(durations, 0.99).Round(time.Millisecond), p(syncs, 0.5), p(syncs, 0.99))
			}
			fmt.Printf("peak resident memory: %s\n", byteSize(ru.Maxrss*1024))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Var(&keys, "keys", "distinct keys (50M, 1000000)")
	fl.Float64Var(&change, "change", 0.01, "share of the keys that change per checkpoint interval after the load")
	fl.IntVar(&updates, "updates", 10, "checkpoint intervals of changes after the load")
	fl.DurationVar(&interval, "checkpoint-interval", time.Second, "time between checkpoints")
	fl.IntVar(&parallelism, "parallelism", runtime.NumCPU(), "subtasks per operator")
	fl.IntVar(&valueBytes, "value-bytes", 0, "bytes of padding stored with each key's count (a bigger state)")
	fl.StringVar(&ckptDir, "checkpoint-dir", "", "where checkpoints go (default: a temporary directory, removed at the end)")
	addStateFlags(cmd, &backend, &stateDir, &incremental)
	return cmd
}

// cpuProfile is the file the bench commands write a CPU profile to.
var cpuProfile string

// startProfile profiles the process's CPU into cpuProfile, if set, until
// stop.
func startProfile() (stop func(), err error) {
	if cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(cpuProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func memLimit(l int64) string {
	if l == math.MaxInt64 {
		return "none"
	}
	return byteSize(l)
}

// keyCount counts per key; its state is the count and pad bytes.
type keyCount struct {
	pad int
	n   *weir.ValueState[int64, []byte]
}

func (k *keyCount) Open(c *weir.KeyedContext[int64]) (err error) {
	k.n, err = weir.NewValueState[int64, []byte](c, "count")
	return err
}

func (k *keyCount) Process(c *weir.KeyedContext[int64], _ int64, _ weir.Collector[int64]) error {
	v, ok := k.n.Value()
	if !ok {
		// Pad bytes that do not compress, as real values would not.
		v = make([]byte, 8+k.pad)
		x := uint64(c.Key())*0x9e3779b97f4a7c15 + 1
		for i := 8; i < len(v); i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			v[i] = byte(x)
		}
	} else {
		v = bytes.Clone(v) // stored values are not changed in place
	}
	binary.BigEndian.PutUint64(v, binary.BigEndian.Uint64(v)+1)
	k.n.Update(v)
	return nil
}

// keySource emits every key once, then random keys at a rate. It has no
// state: the benchmark does not restore.
type keySource struct {
	keys, updates int64
	rate          float64
	mu            sync.Mutex
	readers, done int
	loadedAt      time.Time     // when every subtask finished the load
	loadCPU       time.Duration // the process's CPU time then
}

// loaded says when the load finished, and the CPU time then; ok is false
// before.
func (s *keySource) loaded() (at time.Time, cpu time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadedAt, s.loadCPU, s.done == s.readers && s.readers > 0
}

func (s *keySource) reader() *keyReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers++
	return &keyReader{src: s}
}

type keyReader struct {
	operator.Base
	src        *keySource
	ctx        *operator.Context
	next, step int64 // load position
	updated    int64
	started    time.Time
	loaded     bool
	rng        uint64
}

func (r *keyReader) Open(ctx *operator.Context) error {
	r.ctx, r.next, r.step, r.rng = ctx, int64(ctx.Subtask), int64(ctx.Parallelism), uint64(ctx.Subtask)*0x9e3779b97f4a7c15+1
	return nil
}

func (r *keyReader) Read(out weir.Collector[int64]) (operator.PollResult, error) {
	if !r.loaded {
		for n := 0; n < 1024 && r.next < r.src.keys; n++ {
			out.Collect(r.next)
			r.next += r.step
		}
		if r.next >= r.src.keys {
			r.loaded, r.started = true, r.ctx.Now()
			s := r.src
			s.mu.Lock()
			if s.done++; s.done == s.readers {
				s.loadedAt = time.Now()
				s.loadCPU, _ = cpuTime()
			}
			s.mu.Unlock()
		}
		return operator.PollResult{}, nil
	}
	share := r.src.updates / int64(r.ctx.Parallelism)
	if r.updated >= share {
		return operator.PollResult{Exhausted: true}, nil
	}
	perTask := r.src.rate / float64(r.ctx.Parallelism)
	allowed := min(int64(r.ctx.Now().Sub(r.started).Seconds()*perTask)+1, share) - r.updated
	if allowed <= 0 {
		return operator.PollResult{IdleUntil: r.ctx.Now().Add(time.Millisecond)}, nil
	}
	for range min(allowed, 1024) {
		r.rng ^= r.rng << 13
		r.rng ^= r.rng >> 7
		r.rng ^= r.rng << 17
		out.Collect(int64(r.rng % uint64(r.src.keys)))
		r.updated++
	}
	return operator.PollResult{}, nil
}
