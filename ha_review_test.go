package weir_test

// Outside review of the highly available coordinator (issue 20,
// d35ea82..cd81d43): what a leader records in etcd when its run ends.
// Each test states the defect it shows; they fail on cd81d43.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/transport"
)

// haRig is one etcd, a cluster's certificates and a checkpoint directory.
type haRig struct {
	t     *testing.T
	etcd  *etcdtest.Cluster
	url   string
	certs string
	ckpt  string
	raw   *clientv3.Client
}

const reviewPrefix = "/review"

func newHARig(t *testing.T) *haRig {
	e := etcdtest.Start(t, 1)
	dir := t.TempDir()
	r := &haRig{t: t, etcd: e, url: "etcd://" + strings.Join(e.Hosts(), ",") + reviewPrefix, certs: filepath.Join(dir, "certs"), ckpt: filepath.Join(dir, "ckpt")}
	if err := transport.WriteCerts(r.certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	r.raw = raw
	return r
}

// ended returns the job's ended key, if set.
func (r *haRig) ended(job string) (string, bool) {
	r.t.Helper()
	resp, err := r.raw.Get(context.Background(), reviewPrefix+"/jobs/"+job+"/ended")
	if err != nil {
		r.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitLog waits until logs hold a record whose text starts with prefix.
func waitLog(t *testing.T, logs logRecords, prefix string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !containsMessage(logs.after(time.Time{}, slog.LevelDebug), prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within %v: %q", prefix, limit, logs.after(time.Time{}, slog.LevelInfo))
		}
		time.Sleep(20 * time.Millisecond) // polls the log
	}
}

// endless is a job whose source never ends (2000 records a second).
func endless(env *weir.Environment) error {
	src, err := generator.New(generator.Config[int64]{RatePerSecond: 2000, Make: func(i int64) int64 { return i }})
	if err != nil {
		return err
	}
	type sum struct{ Key, Total int64 }
	nums := weir.Map(weir.Source(env, "numbers", src), "pair", func(i int64) sum { return sum{i % 10, i} })
	totals := weir.Reduce(weir.KeyBy(nums, func(s sum) int64 { return s.Key }), "sum", func(a, b sum) sum { return sum{a.Key, a.Total + b.Total} })
	weir.Sink(totals, "record", weir.SinkFunc(func(sum) error { return nil }))
	return nil
}

// TestReviewHACancelThroughTheAPIEndsTheJob: POST /api/v1/cancel "cancels
// the job". Under --ha it cancels the leader's context, and lead() records
// the job's end only when that context did not end: nothing is recorded,
// so a standby takes the leadership and runs the cancelled job again (and
// so on, for every coordinator, each cancel only moving the job). The job
// cannot be cancelled through its API.
func TestReviewHACancelThroughTheAPIEndsTheJob(t *testing.T) {
	r := newHARig(t)
	logs := newLogRecords()
	web := make(chan string, 1)
	cfg := weir.Config{Job: "cancelled", Logger: slog.New(logs), Web: "127.0.0.1:0", WebToken: "tok", OnWeb: func(a string) { web <- a },
		Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
		Cluster:    weir.ClusterConfig{Role: weir.Coordinator, Listen: freeAddr(t), HA: r.url, HATTL: 2 * time.Second, Certs: r.certs}}
	env := weir.New(cfg)
	if err := endless(env); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(context.Background())
		done <- err
	}()
	addr := <-web
	waitLog(t, logs, "INFO leading the job", 20*time.Second)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/cancel", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %s", resp.Status)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled coordinator did not return")
	}
	if !errors.Is(err, weir.ErrCancelled) {
		t.Fatalf("the cancelled leader returned %v", err)
	}
	if v, ok := r.ended("cancelled"); !ok {
		t.Errorf("the job was cancelled through its API, but etcd holds no record that it ended: a standby takes over and runs it again")
	} else {
		t.Logf("ended: %q", v)
	}
}

// failOnceFS fails the first List of dir (an NFS or disk hiccup).
type failOnceFS struct {
	vfs.FS
	dir    string
	failed atomic.Bool
}

func (f *failOnceFS) List(dir string) ([]string, error) {
	if filepath.Clean(dir) == filepath.Clean(f.dir) && f.failed.CompareAndSwap(false, true) {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: errors.New("input/output error")}
	}
	return f.FS.List(dir)
}

// TestReviewHATransientStorageErrorDoesNotEndTheJob: a leader whose first
// Scan of the checkpoint storage fails transiently (ErrUnavailable: "nothing
// was restored or deleted, start again to retry") returns that error, and
// lead() records it in etcd as the job's end ("failed: …"). Every standby,
// and every coordinator started again as the error advises, then exits
// with "job … ended under an earlier leader": one I/O hiccup ends a highly
// available job for good, and "start again to retry" is false.
func TestReviewHATransientStorageErrorDoesNotEndTheJob(t *testing.T) {
	r := newHARig(t)
	run := func(fs vfs.FS) error {
		env := weir.New(weir.Config{Job: "hiccup", Logger: slog.New(newLogRecords()),
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, FS: fs, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{Role: weir.Coordinator, Listen: freeAddr(t), HA: r.url, HATTL: 2 * time.Second, Certs: r.certs}})
		if err := endless(env); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, err := env.Execute(ctx)
		return err
	}
	err := run(&failOnceFS{FS: vfs.Default, dir: filepath.Join(r.ckpt, "hiccup")})
	t.Logf("the leader whose scan failed returned: %v", err)
	if v, ok := r.ended("hiccup"); ok {
		t.Errorf("a transient storage error at start was recorded as the job's end in etcd: %q", v)
	}
	// Started again, as the error says.
	err = run(vfs.Default)
	if err != nil && strings.Contains(err.Error(), "ended under an earlier leader") {
		t.Errorf("a coordinator started again to retry refuses to run the job: %v", err)
	}
}

// TestReviewHALeaderStoppedKeepsTheCheckpointsForTheStandby: SIGTERM (or
// Ctrl-C) of the leading coordinator cancels its context. lead() treats
// that as no end of the job (a standby takes over), but the run treats it
// as the job's cancellation: with DiscardOnCancel (--retain-on-cancel=false)
// it forgets every completed checkpoint in etcd and deletes them, while
// its term still holds. The standby that takes over finds etcd's counter
// but no checkpoint, and starts the job from the beginning: everything the
// sinks committed is written again.
func TestReviewHALeaderStoppedKeepsTheCheckpointsForTheStandby(t *testing.T) {
	r := newHARig(t)
	addr := freeAddr(t)
	config := func(cc weir.ClusterConfig) weir.Config {
		cc.Certs = r.certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 200*time.Millisecond, 2*time.Second
		return weir.Config{Job: "stopped", Parallelism: 2, Logger: slog.New(newLogRecords()), Cluster: cc,
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 100 * time.Millisecond, DiscardOnCancel: true}}
	}
	start := func(ctx context.Context, cfg weir.Config) <-chan error {
		done := make(chan error, 1)
		go func() {
			env := weir.New(cfg)
			if err := endless(env); err != nil {
				done <- err
				return
			}
			_, err := env.Execute(ctx)
			done <- err
		}()
		return done
	}
	lctx, stopLeader := context.WithCancel(context.Background())
	defer stopLeader()
	leader := start(lctx, config(weir.ClusterConfig{Role: weir.Coordinator, Listen: addr, HA: r.url, HATTL: 2 * time.Second}))
	wctx, stopWorkers := context.WithCancel(context.Background())
	var workers []<-chan error
	for i := 1; i <= 2; i++ {
		workers = append(workers, start(wctx, config(weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: fmt.Sprintf("worker-%d", i), Listen: "127.0.0.1:0"})))
	}
	defer func() {
		stopWorkers()
		for _, w := range workers {
			<-w
		}
	}()
	c, err := ha.Dial(ha.Config{Endpoints: r.etcd.Hosts(), Prefix: reviewPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ps, err := c.Completed(context.Background(), "stopped")
		if err == nil && len(ps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed within a minute (%v)", err)
		}
		time.Sleep(50 * time.Millisecond) // polls etcd
	}
	stopLeader() // SIGTERM: the process stops; a standby is to take over
	select {
	case err := <-leader:
		t.Logf("the stopped leader returned %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped leader did not return")
	}
	if v, ok := r.ended("stopped"); ok {
		t.Logf("ended: %q (the standbys exit)", v)
		return
	}
	ps, err := c.Completed(context.Background(), "stopped")
	if err != nil {
		t.Fatal(err)
	}
	last, known, _ := c.LastCheckpointID(context.Background(), "stopped")
	if len(ps) == 0 && known {
		t.Errorf("the stopped leader forgot every checkpoint in etcd (last id %d) without recording that the job ended: the standby that takes over starts the job from the beginning", last)
	}
}
