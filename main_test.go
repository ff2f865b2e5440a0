package weir_test

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/transport"
)

// sums is a job for Main: the sum of 0..n-1 per residue mod 10, whose
// final values a sink records.
type sums struct {
	mu   sync.Mutex
	last map[int64]int64
}

func (s *sums) build(n int64) func(env *weir.Environment) error {
	return func(env *weir.Environment) error {
		src, err := generator.New(generator.Config[int64]{Count: n, Make: func(i int64) int64 { return i }})
		if err != nil {
			return err
		}
		type sum struct{ Key, Total int64 }
		nums := weir.Map(weir.Source(env, "numbers", src), "pair", func(i int64) sum { return sum{i % 10, i} })
		totals := weir.Reduce(weir.KeyBy(nums, func(s sum) int64 { return s.Key }), "sum", func(a, b sum) sum { return sum{a.Key, a.Total + b.Total} })
		weir.Sink(totals, "record", weir.SinkFunc(func(t sum) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.last[t.Key] = t.Total
			return nil
		}))
		return nil
	}
}

func (s *sums) check(t *testing.T, n int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range int64(10) {
		var want int64
		for i := k; i < n; i += 10 {
			want += i
		}
		if s.last[k] != want {
			t.Fatalf("sum of residue %d: %d, want %d (all: %v)", k, s.last[k], want, s.last)
		}
	}
}

// TestMainRun: a job program's run command runs the whole job.
func TestMainRun(t *testing.T) {
	s := &sums{last: map[int64]int64{}}
	err := weir.RunMain(context.Background(), []string{"run", "--checkpoint-dir", t.TempDir(), "--parallelism", "2", "--checkpoint-interval", "50ms", "--log-level", "warn"},
		weir.Config{Job: "sums"}, s.build(20_000))
	if err != nil {
		t.Fatal(err)
	}
	s.check(t, 20_000)
}

// TestMainFlags: a job program's own flags are parsed with Weir's and set
// before build runs; a name Weir uses already is refused.
func TestMainFlags(t *testing.T) {
	var n int64
	s := &sums{last: map[int64]int64{}}
	define := weir.Flags(func(fs *flag.FlagSet) { fs.Int64Var(&n, "numbers", 100, "how many numbers") })
	err := weir.RunMain(context.Background(), []string{"run", "--numbers", "3000", "--log-level", "warn", "--mode", "none"},
		weir.Config{Job: "sums"}, func(env *weir.Environment) error { return s.build(n)(env) }, define)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3000 {
		t.Fatalf("--numbers 3000 set n to %d", n)
	}
	s.check(t, 3000)

	taken := weir.Flags(func(fs *flag.FlagSet) { fs.String("parallelism", "", "") })
	err = weir.RunMain(context.Background(), []string{"run"}, weir.Config{Job: "sums"}, s.build(10), taken)
	if err == nil || !strings.Contains(err.Error(), "--parallelism is Weir's own") {
		t.Fatalf("a program flag named --parallelism: %v, want a refusal naming it", err)
	}
}

// TestMainRefusesIdleFlags: a flag the other settings make do nothing (a
// checkpoint setting in mode none, --web-token without --web, TLS to etcd
// without --ha) is refused naming it, before the job runs; the same
// setting in the program's Config, or the flag with what it needs, is
// taken.
func TestMainRefusesIdleFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg  weir.Config
		args []string
		flag string
	}{
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--checkpoint-interval", "1s"}, "--checkpoint-interval"},
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--checkpoint-alignment", "unaligned"}, "--checkpoint-alignment"},
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--incremental=false"}, "--incremental"},
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--web-token", "s3cret"}, "--web-token"},
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--ha-cacert", "ca.pem"}, "--ha-cacert"},
		{weir.Config{Job: "sums"}, []string{"--mode", "none", "--web-linger", "0"}, "--web-linger"},
		{weir.Config{Job: "sums", Web: "127.0.0.1:0"}, []string{"--mode", "none", "--web-linger", "0"}, ""},
		{weir.Config{Job: "sums", Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints, Interval: time.Second}}, []string{"--mode", "none"}, ""},
	} {
		s := &sums{last: map[int64]int64{}}
		built := false
		err := weir.RunMain(context.Background(), append([]string{"run", "--log-level", "warn"}, tc.args...), tc.cfg,
			func(env *weir.Environment) error { built = true; return s.build(100)(env) })
		switch {
		case tc.flag == "" && err != nil:
			t.Errorf("%v with %+v: %v, want it run", tc.args, tc.cfg, err)
		case tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag+" does nothing without")):
			t.Errorf("%v: %v, want a refusal naming %s", tc.args, err, tc.flag)
		case tc.flag != "" && built:
			t.Errorf("%v: the job was built before the refusal", tc.args)
		}
	}
}

// TestMainCluster: the same program as a coordinator and two workers, each
// from its own command line.
func TestMainCluster(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	s := &sums{last: map[int64]int64{}}
	common := []string{"--checkpoint-dir", filepath.Join(dir, "ckpt"), "--parallelism", "2", "--checkpoint-interval", "50ms", "--certs", certs, "--log-level", "warn"}
	listening := make(chan string, 1)
	cfg := weir.Config{Job: "sums", Cluster: weir.ClusterConfig{OnListen: func(addr string) { listening <- addr }}}
	done := make(chan error, 1)
	go func() {
		done <- weir.RunMain(context.Background(), append([]string{"coordinator", "--listen", "127.0.0.1:0"}, common...), cfg, s.build(20_000))
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-done:
		t.Fatalf("coordinator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	for _, name := range []string{"worker-1", "worker-2"} {
		workers.Go(func() {
			err := weir.RunMain(ctx, append([]string{"worker", "--join", addr, "--name", name, "--listen", "127.0.0.1:0"}, common...), weir.Config{Job: "sums"}, s.build(20_000))
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	if err := <-done; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	cancel()
	workers.Wait()
	s.check(t, 20_000)
}
