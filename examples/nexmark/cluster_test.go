package nexmark

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/transport"
)

// runCluster runs q on a coordinator and two workers of two slots each in
// this process (loopback TCP, mutual TLS), its events as JSON on the
// wire. With lose set, it stops worker-1 after the first checkpoint and
// starts it again: the job restarts from its latest checkpoint.
func runCluster(t *testing.T, q Query, cfg Config, dir string, lose bool, alignment weir.CheckpointConfig) weir.Result {
	t.Helper()
	certs := filepath.Join(t.TempDir(), "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	listening := make(chan string, 1)
	restarted, checkpointed := make(chan struct{}, 16), make(chan struct{}, 1)
	config := func(role weir.Role, name, join string) weir.Config {
		// A heartbeat timeout of 3 s: with 1 s, CI's loaded machine (a
		// coordinator and two workers in one process, under -race) starved
		// heartbeats during restores, and the workers fenced themselves
		// one restart after another until the restart strategy gave up. A
		// lost worker is found by its closed connection, not the timeout.
		c := weir.Config{Job: "nexmark-" + q.Name, Parallelism: 3, WatermarkInterval: time.Millisecond,
			Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: ckpt, Alignment: alignment.Alignment, AlignedTimeout: alignment.AlignedTimeout},
			Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
			Logger:     slog.New(slog.DiscardHandler),
			Cluster: weir.ClusterConfig{Role: role, Name: name, Join: join, Certs: certs, Listen: "127.0.0.1:0", Slots: 2,
				HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: 3 * time.Second}}
		if role == weir.Coordinator {
			c.Cluster.OnListen = func(addr string) { listening <- addr }
			c.OnEvent = func(ev weir.JobEvent) {
				switch ev.Kind {
				case weir.EventCheckpointCompleted:
					select {
					case checkpointed <- struct{}{}:
					default:
					}
				case weir.EventRestarting:
					restarted <- struct{}{}
				}
			}
		}
		return c
	}
	build := func(c weir.Config) *weir.Environment {
		env := weir.New(c)
		gen, err := Generator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		events := weir.Source(env, "nexmark", gen, weir.Watermarks(weir.BoundedOutOfOrderness(Watermark, EventTime)))
		if err := q.add(events, Output{Dir: dir}); err != nil {
			t.Fatal(err)
		}
		return env
	}
	type result struct {
		res weir.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := build(config(weir.Coordinator, "coordinator", "")).Execute(context.Background())
		done <- result{res, err}
	}()
	addr := <-listening
	workers := map[string]func(){}
	start := func(name string) {
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		env := build(config(weir.Worker, name, addr))
		go func() {
			defer close(stopped)
			if _, err := env.Execute(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
		workers[name] = func() {
			cancel()
			<-stopped
		}
	}
	start("worker-1")
	start("worker-2")
	defer func() {
		for _, stop := range workers {
			stop()
		}
	}()
	if lose {
		select {
		case <-checkpointed:
		case r := <-done:
			t.Fatalf("the job ended (%v) before its first checkpoint", r.err)
		}
		workers["worker-1"]()
		select {
		case <-restarted:
		case r := <-done:
			t.Fatalf("the job ended (%v) before it lost worker-1", r.err)
		}
		start("worker-1")
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if lose && r.res.Attempts < 2 {
		t.Fatalf("%d attempts: losing a worker restarted nothing", r.res.Attempts)
	}
	return r.res
}

// TestQueriesOnACluster: a windowed query (q5, hot items) and a windowed
// join (q8, new users) on a coordinator and two workers give exactly the
// brute force's results, straight through and when a worker is lost
// midway and comes back.
func TestQueriesOnACluster(t *testing.T) {
	evs := events(t, testConfig, 3)
	for _, name := range []string{"q5", "q8"} {
		q, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			want := jsonLines(t, bruteForce[name](evs))
			straight := t.TempDir()
			runCluster(t, q[0], testConfig, straight, false, weir.CheckpointConfig{})
			if got := committed(t, straight); !slices.Equal(got, want) {
				t.Fatalf("straight: %s", diff(got, want))
			}
			lost, slow := t.TempDir(), testConfig
			slow.Throttle = 100_000
			res := runCluster(t, q[0], slow, lost, true, weir.CheckpointConfig{})
			if got := committed(t, lost); !slices.Equal(got, want) {
				t.Fatalf("with a worker lost: %s", diff(got, want))
			}
			t.Logf("%d results; %d attempts when a worker was lost", len(want), res.Attempts)
		})
	}
}

// TestUnalignedQueriesOnACluster: q3, q5 and q8 on a cluster with unaligned
// checkpoints and with a 1 ms aligned timeout, a worker lost midway: the
// brute force's results.
func TestUnalignedQueriesOnACluster(t *testing.T) {
	evs := events(t, testConfig, 3)
	for i, name := range []string{"q3", "q5", "q8"} {
		q, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		// Each query in one of the two modes, in turn (both, in the
		// process-local test). NB: the timeout mode once lost 10 of q5's 29
		// results here: workers got no trigger time nor "must align" from
		// the coordinator, so every barrier was promoted at once, the final
		// checkpoint's past end of data.
		cc := []weir.CheckpointConfig{{Alignment: weir.Unaligned}, {AlignedTimeout: time.Millisecond}}[i%2]
		t.Run(fmt.Sprintf("%s/%v-timeout-%v", name, cc.Alignment, cc.AlignedTimeout), func(t *testing.T) {
			want := jsonLines(t, bruteForce[name](evs))
			lost, slow := t.TempDir(), testConfig
			slow.Throttle = 100_000
			res := runCluster(t, q[0], slow, lost, true, cc)
			if got := committed(t, lost); !slices.Equal(got, want) {
				t.Fatalf("with a worker lost: %s", diff(got, want))
			}
			t.Logf("%d results; %d attempts", len(want), res.Attempts)
		})
	}
}
