package weir_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/transport"
)

// logRecords is a slog.Handler that keeps every record, for a test to
// read.
type logRecords struct {
	mu      *sync.Mutex
	records *[]slog.Record
	attrs   []slog.Attr
}

func newLogRecords() logRecords { return logRecords{mu: &sync.Mutex{}, records: new([]slog.Record)} }

func (h logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h logRecords) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, r)
	return nil
}

func (h logRecords) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

func (h logRecords) WithGroup(string) slog.Handler { return h }

// after returns the records at level or above logged at or after t.
func (h logRecords) after(t time.Time, level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range *h.records {
		if r.Level >= level && !r.Time.Before(t) {
			s := r.Level.String() + " " + r.Message
			r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
			out = append(out, s)
		}
	}
	return out
}

// TestWorkersExitWhenTheJobFinishes: when the job finishes, its workers
// return nil (a worker process exits 0) with one INFO line, instead of
// looking for the coordinator that has gone and logging a WARN every
// second (issue 19, defect 20); and the coordinator counts every
// operator's records as its workers ran them.
func TestWorkersExitWhenTheJobFinishes(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 20_000
	s := &sums{last: map[int64]int64{}}
	config := func(cc weir.ClusterConfig, logger *slog.Logger) weir.Config {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 200*time.Millisecond, 3*time.Second
		return weir.Config{Job: "sums", Parallelism: 2, Cluster: cc, Logger: logger,
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 50 * time.Millisecond}}
	}
	var coordinatorEnv *weir.Environment
	execute := func(cfg weir.Config) error {
		env := weir.New(cfg)
		if cfg.Cluster.Role == weir.Coordinator {
			coordinatorEnv = env
		}
		if err := s.build(n)(env); err != nil {
			return err
		}
		_, err := env.Execute(context.Background())
		return err
	}
	coordinatorLogs := newLogRecords()
	listening := make(chan string, 1)
	coordinator := make(chan error, 1)
	go func() {
		cc := weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }}
		coordinator <- execute(config(cc, slog.New(coordinatorLogs)))
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-coordinator:
		t.Fatalf("coordinator: %v", err)
	}
	logs := newLogRecords()
	workers := make(chan error, 2)
	for _, name := range []string{"worker-1", "worker-2"} {
		go func() {
			cc := weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0"}
			err := execute(config(cc, slog.New(logs).With("process", name)))
			if err != nil {
				err = fmt.Errorf("%s: %w", name, err)
			}
			workers <- err
		}()
	}
	if err := <-coordinator; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	finished := time.Now()
	s.check(t, n)
	// A worker hears of the end at its next heartbeat, or when it asks
	// to register again; 10 s is dozens of heartbeat intervals.
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case err := <-workers:
			if err != nil {
				t.Errorf("a worker returned %v after the job finished, want nil", err)
			}
		case <-deadline:
			t.Fatalf("a worker still runs 10 s after the job finished; it logged since:\n%q\nthe coordinator warned:\n%q", logs.after(finished, slog.LevelInfo), coordinatorLogs.after(time.Time{}, slog.LevelWarn))
		}
	}
	if warns := logs.after(finished, slog.LevelWarn); len(warns) > 0 {
		t.Errorf("workers logged after the job finished:\n%q", warns)
	}
	if infos := logs.after(time.Time{}, slog.LevelInfo); !containsMessage(infos, "INFO the job finished") {
		t.Errorf("no worker said the job finished: %q", infos)
	}
	// The coordinator runs no operator: its counts are the workers',
	// final since their last heartbeat heard the job finished (issue 22:
	// a cluster's operators showed 0 records).
	for _, m := range coordinatorEnv.Metrics() {
		if m.Records != n {
			t.Errorf("the coordinator counts %d records into %s, want %d (all: %+v)", m.Records, m.UID, n, coordinatorEnv.Metrics())
		}
	}
}

func containsMessage(lines []string, prefix string) bool {
	for _, l := range lines {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
