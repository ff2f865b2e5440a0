package weir_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/transport"
)

// syncBuffer is a log a test reads while the job writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// TestClusterWorkerRestartsFromItsLocalCopy: a cluster of two workers
// with local recovery; worker-1's process is stopped and a new one joins
// under its name with the same local directory. It gets its subtasks
// back (the placement is the same for the same workers), and every
// restore, on both workers, reads its state from the local copy.
func TestClusterWorkerRestartsFromItsLocalCopy(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var mu sync.Mutex
	completed, restoredAt := 0, 0
	events := make(chan struct{}, 1000)
	onEvent := func(e weir.JobEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == weir.EventCheckpointCompleted:
			completed++
		case e.Kind == weir.EventRunning && e.RestoredFrom != 0:
			restoredAt = completed
		}
		events <- struct{}{}
	}
	execute := func(ctx context.Context, cc weir.ClusterConfig, logs io.Writer) {
		defer wg.Done()
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
		cfg := weir.Config{Job: "clustered", Parallelism: 2, Cluster: cc, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 100 * time.Millisecond}}
		if cc.Role == weir.Worker {
			cfg.LocalRecovery, cfg.LocalRecoveryDir = true, filepath.Join(dir, "local-"+cc.Name)
		} else {
			cfg.OnEvent = onEvent
		}
		env := weir.New(cfg)
		if err := sumsOfNumbers(env, 20_000); err != nil {
			t.Error(err)
			return
		}
		if _, err := env.Execute(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			t.Logf("%s ended: %v", cc.Role, err)
		}
	}
	listening := make(chan string, 1)
	wg.Add(1)
	go execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }}, io.Discard)
	addr := <-listening
	worker := func(name string, logs io.Writer) context.CancelFunc {
		wctx, cancel := context.WithCancel(ctx)
		wg.Add(1)
		go execute(wctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1}, logs)
		return cancel
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			done := ok()
			mu.Unlock()
			if done {
				return
			}
			select {
			case <-events:
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	var logs1, logs2 syncBuffer
	stop1 := worker("worker-1", io.Discard)
	worker("worker-2", &logs2)
	// After 12 checkpoints (1.2 s at least, 24,000 records) every key
	// has a sum: each subtask's state is well above the inline limit.
	waitFor("12 checkpoints", func() bool { return completed >= 12 })
	stop1()
	worker("worker-1", &logs1)
	waitFor("a checkpoint after the restore", func() bool { return restoredAt > 0 && completed > restoredAt })
	for name, logs := range map[string]*syncBuffer{"worker-1": &logs1, "worker-2": &logs2} {
		local, remote := restoredBytes(t, logs.String())
		if local == 0 || remote != 0 {
			t.Errorf("%s restored %d bytes locally, %d from the checkpoint storage; want only local:\n%s", name, local, remote, logs.String())
		}
	}
}

// TestClusterPlacesSubtasksWhereTheirLocalCopiesAre: worker-2 and
// worker-3 run the job; then the whole cluster stops, and it starts again
// (restoring the latest checkpoint, the one worker-2's local copies are
// of) on worker-1, new, and worker-2. Placement by names alone would put pipeline 0 on
// worker-1 and send worker-2 pipeline 1, whose state it never held;
// preferring the worker that holds the copies keeps pipeline 0 on
// worker-2, which restores it locally.
func TestClusterPlacesSubtasksWhereTheirLocalCopiesAre(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2", "worker-3"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "ckpt")
	var web string     // the coordinator's web address (set before it listens)
	var metrics string // the restored bytes its /metrics said last
	// run runs the cluster until the coordinator has seen, since the
	// start, n completed checkpoints and one after a restore if restore is
	// set, and then until check (if set) is true; it returns the workers'
	// logs.
	run := func(restore string, n int, check func(logs map[string]*syncBuffer) bool, workers ...string) map[string]*syncBuffer {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		var mu sync.Mutex
		completed, restored := 0, false
		events := make(chan struct{}, 1)
		onEvent := func(e weir.JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Kind == weir.EventCheckpointCompleted:
				completed++
			case e.Kind == weir.EventRunning && e.RestoredFrom != 0:
				restored, completed = true, 0
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
		coordinatorEnded := make(chan struct{})
		execute := func(cc weir.ClusterConfig, logs io.Writer) {
			defer wg.Done()
			if cc.Role == weir.Coordinator {
				defer close(coordinatorEnded)
			}
			cc.Certs = certs
			cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
			cfg := weir.Config{Job: "clustered", Parallelism: 2, Cluster: cc, Logger: slog.New(slog.NewTextHandler(logs, nil)),
				Checkpoint: weir.CheckpointConfig{Dir: ckpt, Interval: 100 * time.Millisecond, Retained: 5}}
			if cc.Role == weir.Worker {
				cfg.LocalRecovery, cfg.LocalRecoveryDir = true, filepath.Join(dir, "local-"+cc.Name)
			} else {
				cfg.OnEvent, cfg.Restore = onEvent, restore
				// Its /metrics sums what the workers' restores read.
				cfg.LocalRecovery, cfg.Web, cfg.OnWeb = true, "127.0.0.1:0", func(addr string) { web = addr }
			}
			env := weir.New(cfg)
			if err := sumsOfNumbers(env, 20_000); err != nil {
				t.Error(err)
				return
			}
			if _, err := env.Execute(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				t.Errorf("%s %s ended: %v", cc.Role, cc.Name, err)
			}
		}
		listening := make(chan string, 1)
		wg.Add(1)
		go execute(weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }}, io.Discard)
		var addr string
		select {
		case addr = <-listening:
		case <-coordinatorEnded:
			t.Fatalf("the coordinator ended before it listened (restore %q)", restore)
		}
		logs := map[string]*syncBuffer{}
		for _, name := range workers {
			logs[name] = &syncBuffer{}
			wg.Add(1)
			go execute(weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1}, logs[name])
		}
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			done := completed >= n && (restore == "" || restored)
			mu.Unlock()
			if done && (check == nil || check(logs)) {
				return logs
			}
			select {
			case <-events:
			case <-time.After(100 * time.Millisecond):
			case <-coordinatorEnded:
				t.Fatalf("the coordinator ended before %d checkpoints (restore %q)", n, restore)
			case <-deadline:
				t.Fatalf("timed out waiting for %d checkpoints (restore %q) and the check (coordinator's metrics:\n%s)", n, restore, metrics)
			}
		}
	}
	// 12 checkpoints: every key has a sum, each subtask's state is a file.
	run("", 12, nil, "worker-2", "worker-3")
	// The checkpoint worker-2's copies are of (its tasks' completion
	// markers; they differ only if the stop came between two tasks'
	// completions of one checkpoint: then the oldest, kept, is restored
	// and only its copies count).
	markers, err := filepath.Glob(filepath.Join(dir, "local-worker-2", "clustered", "*", ".completed"))
	if err != nil || len(markers) == 0 {
		t.Fatalf("worker-2 holds no completed local copy: %v %v", markers, err)
	}
	var ids []int
	for _, m := range markers {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A cluster restores its latest checkpoint: any newer than the
	// copies' goes (the stop can come just after a checkpoint completed,
	// before worker-2's tasks heard).
	chks, err := filepath.Glob(filepath.Join(ckpt, "clustered", "chk-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chks {
		if id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(c), "chk-")); err == nil && id > slices.Min(ids) {
			if err := os.RemoveAll(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The coordinator's /metrics counts the workers' restored bytes,
	// which their heartbeats carry: wait until they say what the
	// workers' logs say.
	logs := run("latest", 1, func(logs map[string]*syncBuffer) bool {
		local, remote := int64(0), int64(0)
		for _, l := range logs {
			lb, rb := restoredBytes(t, l.String())
			local, remote = local+lb, remote+rb
		}
		resp, err := http.Get("http://" + web + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = ""
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "weir_restore_bytes_total") {
				metrics += line + "\n"
			}
		}
		return metricIs(metrics, `weir_restore_bytes_total{job="clustered",source="local"}`, local) &&
			metricIs(metrics, `weir_restore_bytes_total{job="clustered",source="remote"}`, remote)
	}, "worker-1", "worker-2")
	local2, remote2 := restoredBytes(t, logs["worker-2"].String())
	local1, remote1 := restoredBytes(t, logs["worker-1"].String())
	if local2 == 0 || slices.Min(ids) == slices.Max(ids) && remote2 != 0 {
		t.Errorf("worker-2 restored %d bytes locally, %d from the checkpoint storage; want only local (its copies: checkpoints %v):\n%s", local2, remote2, ids, logs["worker-2"])
	}
	if local1 != 0 || remote1 == 0 {
		t.Errorf("worker-1 (new) restored %d bytes locally, %d from the checkpoint storage; want only remote", local1, remote1)
	}
}

// metricIs reports whether the series named in metrics has value want.
func metricIs(metrics, series string, want int64) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && f == float64(want)
		}
	}
	return false
}
