package weir_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/internal/transport"
)

// TestReviewClusterFreshStartWithAGrowingLastFile: a cluster of a
// coordinator and two one-slot workers reads dir/in/*.txt at parallelism
// 2, fresh. a.txt (3 splits of 100 bytes) is never touched; z.txt, the
// last file (a log being written), is appended to between the two workers'
// builds and gets a second split. Each worker globs and deals alone; dealt
// by offset (fb8079f), the split of a.txt at byte 200 fell to subtask 1 in
// one worker's deal and to subtask 0 in the other's, so it was read by
// neither or by both. Every line of a.txt must be read once.
func TestReviewClusterFreshStartWithAGrowingLastFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.MkdirAll(in, 0o755)
	write := func(name string, n int) []string {
		var b strings.Builder
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("%s %d", name, i))
			b.WriteString(want[i] + "\n")
		}
		if err := os.WriteFile(filepath.Join(in, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return want
	}
	a := write("a.txt", 30) // 260 bytes: 3 splits
	write("z.txt", 5)       // 40 bytes: 1 split
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execute := func(cc weir.ClusterConfig, built chan<- struct{}) error {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 200*time.Millisecond, 3*time.Second
		env := weir.New(weir.Config{Job: "lines", Parallelism: 2, Cluster: cc, Logger: slog.New(slog.DiscardHandler),
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: time.Hour}})
		lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(in, "*.txt"), SplitBytes: 100})
		if err != nil {
			return err
		}
		weir.Sink(weir.Source(env, "lines", lines), "count", weir.SinkFunc(func(s string) error {
			mu.Lock()
			defer mu.Unlock()
			got[s]++
			return nil
		}))
		if built != nil {
			close(built)
		}
		_, err = env.Execute(ctx)
		return err
	}
	listening := make(chan string, 1)
	coordinator := make(chan error, 1)
	go func() {
		coordinator <- execute(weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }}, nil)
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-coordinator:
		t.Fatalf("coordinator: %v", err)
	}
	workers := make(chan error, 2)
	for i, name := range []string{"worker-1", "worker-2"} {
		built := make(chan struct{})
		go func() {
			workers <- execute(weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0"}, built)
		}()
		<-built
		if i == 0 {
			write("z.txt", 20) // appended to: 170 bytes, 2 splits
		}
	}
	if err := <-coordinator; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	for range 2 {
		<-workers
	}
	mu.Lock()
	defer mu.Unlock()
	var lost, twice []string
	for _, l := range a {
		switch got[l] {
		case 0:
			lost = append(lost, l)
		case 1:
		default:
			twice = append(twice, l)
		}
	}
	if len(lost)+len(twice) > 0 {
		t.Fatalf("a.txt, never touched: %d of its %d lines lost (%q), %d read twice (%q)", len(lost), len(a), lost, len(twice), twice)
	}
}
