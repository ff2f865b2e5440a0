package weir_test

// What a fourth outside review of the highly available coordinator found
// one step beside the tested paths (session 36, design note 131). Each
// test's comment says the defect it showed; the tests now hold the fix.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/ha"
)

// blipProxy forwards TCP to etcd. Once armed, the first client write that
// holds marker makes it drop that connection (both ways) before the bytes
// reach etcd: one lost connection, the most ordinary transient error.
// Later connections pass.
type blipProxy struct {
	ln     net.Listener
	target string
	marker []byte
	armed  atomic.Bool
	hits   atomic.Int32
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlipProxy(t *testing.T, target, marker string) *blipProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blipProxy{ln: ln, target: target, marker: []byte(marker)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(c, s, true)
			go p.pipe(s, c, false)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *blipProxy) pipe(from, to net.Conn, up bool) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if up && bytes.Contains(buf[:n], p.marker) && p.armed.CompareAndSwap(true, false) {
				p.hits.Add(1)
				return // the connection drops with the request unsent
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (p *blipProxy) addr() string { return p.ln.Addr().String() }

// TestHAEndSurvivesOneDroppedEtcdConnection: a job cancelled through its
// API (POST /api/v1/cancel) must not run again: lead() records
// "cancelled" in etcd so that the standbys exit. But End is tried once:
// if that single write meets a dropped connection (one transient error,
// etcd itself healthy), the leader only logs a warning, resigns and
// returns ErrCancelled to the operator as if the cancel took. The
// standby then leads, finds no end recorded, restores the latest
// checkpoint and runs the cancelled job on, writing output after the
// operator was told it was cancelled. (The same holds for a stop with a
// savepoint: the standby runs on from the savepoint the operator is about
// to start a new version from: duplicates.)
func TestHAEndSurvivesOneDroppedEtcdConnection(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"cancel", "/api/v1/cancel"},
		{"stop-with-savepoint", "/api/v1/savepoints?stop=true"},
	} {
		t.Run(tc.name, func(t *testing.T) { blipAtTheEnd(t, tc.path) })
	}
}

func blipAtTheEnd(t *testing.T, path string) {
	r := newHARig(t)
	const job = "blip"
	// The leader reaches etcd through the proxy; the standby directly.
	p := newBlipProxy(t, r.etcd.Hosts()[0], reviewPrefix+"/jobs/"+job+"/ended")
	start := func(ctx context.Context, url string) *haProc {
		return startHA(t, ctx, weir.Config{Job: job, Web: "127.0.0.1:0", WebToken: "tok",
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: url, HATTL: 2 * time.Second}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := start(ctx, "etcd://"+p.addr()+reviewPrefix)
	waitLog(t, a.logs, "INFO leading the job", 20*time.Second)
	waitLog(t, a.logs, "INFO checkpoint completed", 20*time.Second)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	b := start(bctx, r.url)
	waitLog(t, b.logs, "INFO standing by", 20*time.Second)

	p.armed.Store(true) // the next write of the ended key meets a dropped connection
	postAPI(t, <-a.web, path)
	aerr := waitDone(t, a.done)
	if p.hits.Load() == 0 {
		t.Skipf("the blip did not hit the write of the job's end (the leader returned %v)", aerr)
	}
	t.Logf("the leader returned %v; its warnings: %q", aerr, filterWarn(a.logs))

	// The job must not run again: the standby should exit.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-b.done:
			t.Logf("the standby returned %v (fine)", err)
			return
		default:
		}
		if containsMessage(b.logs.after(time.Time{}, slog.LevelInfo), "INFO checkpoint completed") {
			v, ok := r.ended(job)
			var restored []string
			for _, l := range b.logs.after(time.Time{}, slog.LevelInfo) {
				if strings.HasPrefix(l, "INFO restoring checkpoint") {
					restored = append(restored, l)
				}
			}
			t.Fatalf("POST %s ended the job (the leader returned %v, after one dropped connection to etcd), yet the standby leads and runs it on, completing checkpoints (%q); etcd's ended key: %q (set: %v)", path, aerr, restored, v, ok)
		}
		time.Sleep(20 * time.Millisecond) // polls the standby's log
	}
	t.Fatalf("the standby neither exited nor ran within 20 s: %q", b.logs.after(time.Time{}, slog.LevelInfo))
}

func filterWarn(logs logRecords) []string {
	var out []string
	for _, l := range logs.after(time.Time{}, slog.LevelWarn) {
		if strings.Contains(l, "etcd") {
			out = append(out, l)
		}
	}
	return out
}

// staleListFS hides one checkpoint directory from listings of the job's
// directory: a listing cache that has not seen the newest directory yet
// (an NFS client's attribute cache on another host than the one that
// wrote it, acdirmin/acdirmax), while the directory itself is intact.
type staleListFS struct {
	vfs.FS
	jobDir string
	hide   atomic.Value // string: the name hidden
}

func (f *staleListFS) List(dir string) ([]string, error) {
	names, err := f.FS.List(dir)
	h, _ := f.hide.Load().(string)
	if err != nil || h == "" || filepath.Clean(dir) != filepath.Clean(f.jobDir) {
		return names, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == h }), nil
}

// TestHANewLeaderWaitsForACheckpointItsListingLacks: etcd is the
// commit point: "a new leader restores the newest checkpoint etcd
// records". When the new leader's view of the storage lacks the newest
// recorded checkpoint's metadata for a moment (a stale directory listing
// on the standby's host), Led.Scan calls it proven damage, and the
// runtime restores the previous checkpoint and then *deletes* the newest
// one, forgetting its record in etcd: the job goes back one checkpoint
// whose output the sinks committed (duplicates from any sink that cannot
// roll back), and the evidence in etcd is gone. Absence in one listing is
// not proof; the leader should refuse (ErrUnavailable, retry) rather than
// destroy the record etcd holds.
func TestHANewLeaderWaitsForACheckpointItsListingLacks(t *testing.T) {
	r := newHARig(t)
	const job = "stale"
	c, err := ha.Dial(ha.Config{Endpoints: r.etcd.Hosts(), Prefix: reviewPrefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	completed := func() []checkpoint.ID {
		ps, err := c.Completed(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		var ids []checkpoint.ID
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		return ids
	}
	start := func(ctx context.Context, fs vfs.FS) *haProc {
		return startHA(t, ctx, weir.Config{Job: job,
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, FS: fs, Interval: 50 * time.Millisecond, Retained: 3},
			Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
	}
	// A leads until etcd records three completed checkpoints, then is
	// stopped (a rolling restart: its checkpoints are kept).
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	adone := start(actx, vfs.Default).done
	waitFor(t, "three completed checkpoints in etcd", 30*time.Second, func() bool { return len(completed()) >= 3 })
	acancel()
	waitDone(t, adone)
	ids := completed()
	newest := ids[len(ids)-1]
	t.Logf("etcd records completed checkpoints %v", ids)

	// B takes over; its listing of the job's directory lags by one
	// checkpoint.
	fs := &staleListFS{FS: vfs.Default, jobDir: filepath.Join(r.ckpt, job)}
	fs.hide.Store(fmt.Sprintf("chk-%d", newest))
	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	b := start(bctx, fs)
	logs, bdone := b.logs, b.done
	failedAtStart := func() bool {
		for _, l := range logs.after(time.Time{}, slog.LevelWarn) {
			if strings.HasPrefix(l, "WARN the run failed at start; standing by again") && strings.Contains(l, fmt.Sprintf("etcd records checkpoints [%d] of job", newest)) {
				return true
			}
		}
		return false
	}
	waitFor(t, "B's start failing on the checkpoint its listing lacks", 30*time.Second, func() bool {
		select {
		case err := <-bdone:
			t.Fatalf("B ended: %v; its log:\n%s", err, strings.Join(logs.after(time.Time{}, slog.LevelInfo), "\n"))
		default:
		}
		return failedAtStart() || containsMessage(logs.after(time.Time{}, slog.LevelInfo), "INFO restoring checkpoint")
	})
	if !failedAtStart() {
		t.Fatalf("B restored a checkpoint while its listing lacked checkpoint %d; its log:\n%s", newest, strings.Join(logs.after(time.Time{}, slog.LevelInfo), "\n"))
	}
	if after := completed(); !slices.Contains(after, newest) {
		t.Fatalf("the new leader forgot checkpoint %d in etcd (now %v)", newest, after)
	}
	// The listing catches up: the next start restores the newest.
	fs.hide.Store("")
	restoredNewest := fmt.Sprintf("checkpoint=%d ", newest)
	waitFor(t, "B restoring the newest checkpoint", 30*time.Second, func() bool {
		for _, l := range logs.after(time.Time{}, slog.LevelInfo) {
			if strings.HasPrefix(l, "INFO restoring checkpoint") && strings.Contains(l+" ", restoredNewest) {
				return true
			}
		}
		return false
	})
}

// TestHAStandbyWithAnotherCheckpointDirIsToldToCheckIt: a
// standby started with another --checkpoint-dir than the leader's (a typo,
// or a local path that is not the shared mount on its host) takes over
// and finds none of the checkpoints etcd records. Its run fails at start
// with "every checkpoint in <dir> is damaged ... restore an older one by
// path (--restore <dir>/chk-<id>), or start over with --fresh": the
// checkpoints are not damaged (they are intact in the job's storage), and
// both remedies are flags that --ha refuses. The on-call operator is sent
// to delete the job's output. Expected: an error that says etcd records
// checkpoints this storage does not hold, and to check --checkpoint-dir.
func TestHAStandbyWithAnotherCheckpointDirIsToldToCheckIt(t *testing.T) {
	r := newHARig(t)
	const job = "wrongdir"
	c, err := ha.Dial(ha.Config{Endpoints: r.etcd.Hosts(), Prefix: reviewPrefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := func(ctx context.Context, dir string) *haProc {
		return startHA(t, ctx, weir.Config{Job: job,
			Checkpoint: weir.CheckpointConfig{Dir: dir, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
	}
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	adone := start(actx, r.ckpt).done
	waitFor(t, "a completed checkpoint in etcd", 30*time.Second, func() bool {
		ps, err := c.Completed(context.Background(), job)
		return err == nil && len(ps) > 0
	})
	acancel()
	waitDone(t, adone)

	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	b := start(bctx, filepath.Join(t.TempDir(), "elsewhere"))
	logs, bdone := b.logs, b.done
	waitLog(t, logs, "WARN the run failed at start", 30*time.Second)
	bcancel()
	waitDone(t, bdone)
	var msg string
	for _, l := range logs.after(time.Time{}, slog.LevelWarn) {
		if strings.HasPrefix(l, "WARN the run failed at start") {
			msg = l
		}
	}
	if strings.Contains(msg, "--fresh") || strings.Contains(msg, "--restore <dir>") || strings.Contains(msg, "damaged") ||
		!strings.Contains(msg, "etcd records checkpoints") || !strings.Contains(msg, "--checkpoint-dir") {
		t.Errorf("a standby given another checkpoint directory is told its checkpoints are damaged, and to use flags --ha refuses:\n%s", msg)
	}
}

// TestHAStandbyRefusesCancelAndSavepoint: every coordinator
// serves the job's API (Config.Web), standbys too. POST /api/v1/cancel
// to a standby answers 202 and that process returns "job cancelled
// through the API", but a standby holds no term, so nothing is recorded:
// the leader runs the job on, untouched, and the cluster has one standby
// less. An operator (or a load balancer in front of the coordinators'
// APIs) cancelling the job is told it is cancelled while it runs.
func TestHAStandbyRefusesCancelAndSavepoint(t *testing.T) {
	r := newHARig(t)
	const job = "cancelstandby"
	start := func(ctx context.Context) *haProc {
		return startHA(t, ctx, weir.Config{Job: job, Web: "127.0.0.1:0", WebToken: "tok",
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	// NB: both processes end before the test's directories go: the leader
	// writing a checkpoint as they were deleted failed the test (CI,
	// session 39).
	var procs []*haProc
	defer func() {
		cancel()
		for _, x := range procs {
			waitDone(t, x.done)
		}
	}()
	a := start(ctx)
	procs = append(procs, a)
	waitLog(t, a.logs, "INFO leading the job", 20*time.Second)
	b := start(ctx)
	procs = append(procs, b)
	waitLog(t, b.logs, "INFO standing by", 20*time.Second)

	addr := <-b.web
	for _, path := range []string{"/api/v1/cancel", "/api/v1/savepoints"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "this process stands by") {
			t.Errorf("POST %s to a standby: %s %s, want 409 saying it stands by", path, resp.Status, body)
		}
	}
	select {
	case err := <-b.done:
		b.done <- err // for the wait at the end
		t.Fatalf("the standby ended after the requests it refused: %v", err)
	default:
	}
	n := len(a.logs.after(time.Time{}, slog.LevelInfo))
	waitFor(t, "another checkpoint on the leader", 20*time.Second, func() bool {
		for _, l := range a.logs.after(time.Time{}, slog.LevelInfo)[n:] {
			if strings.HasPrefix(l, "INFO checkpoint completed") {
				return true
			}
		}
		return false
	})
	if v, ended := r.ended(job); ended {
		t.Errorf("the job's end is recorded (%q) after a cancel a standby refused", v)
	}
}

// TestHAOneDroppedEtcdConnectionAtAnIDFailsNothing: the leader
// reserves every checkpoint id in etcd. One dropped connection while that
// write is in flight (etcd itself healthy; a connection reset, an etcd
// member restarted) declines the checkpoint, and with the default
// tolerable failures (0) the job fails over: every task is cancelled and
// redeployed, and the interval since the last checkpoint is replayed.
// A lost answer to the id counter proves nothing about the job (the next
// id is simply larger; the term still holds: the lease was renewed): it
// should be retried, or not count as a checkpoint failure (Flink does
// not count a trigger's failure to get an id), not restart the job.
func TestHAOneDroppedEtcdConnectionAtAnIDFailsNothing(t *testing.T) {
	r := newHARig(t)
	const job = "idblip"
	p := newBlipProxy(t, r.etcd.Hosts()[0], reviewPrefix+"/jobs/"+job+"/checkpoint-id")
	logs := newLogRecords()
	env := weir.New(weir.Config{Job: job, Logger: slog.New(logs),
		Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
		Cluster:    weir.ClusterConfig{HA: "etcd://" + p.addr() + reviewPrefix, HATTL: 2 * time.Second}})
	if err := endless(env); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(ctx)
		done <- err
	}()
	defer func() { cancel(); waitDone(t, done) }()
	waitLog(t, logs, "INFO checkpoint completed", 20*time.Second)
	p.armed.Store(true)
	waitFor(t, "the dropped connection", 20*time.Second, func() bool { return p.hits.Load() > 0 })
	n := len(logs.after(time.Time{}, slog.LevelInfo))
	waitFor(t, "a checkpoint after the blip, or a restart", 20*time.Second, func() bool {
		for _, l := range logs.after(time.Time{}, slog.LevelInfo)[n:] {
			if strings.HasPrefix(l, "WARN job failed; restarting") || strings.HasPrefix(l, "INFO checkpoint completed") {
				return true
			}
		}
		return false
	})
	for _, l := range logs.after(time.Time{}, slog.LevelInfo) {
		if strings.HasPrefix(l, "WARN job failed; restarting") {
			t.Errorf("one dropped connection to etcd failed the job over:\n%s", l)
		}
	}
}

// TestHAFinishedJobWhoseEndBlippedIsExactlyOnce: a bounded job
// finishes, and the write of "finished" meets a dropped connection; the
// standby leads and runs the finished job again from its final checkpoint.
// Every number must still be committed exactly once, and the standby must
// record the end. (Coverage of the benign variant of the blip at the end.)
func TestHAFinishedJobWhoseEndBlippedIsExactlyOnce(t *testing.T) {
	r := newHARig(t)
	const job, count = "blipdone", 8000
	out := filepath.Join(t.TempDir(), "out")
	p := newBlipProxy(t, r.etcd.Hosts()[0], reviewPrefix+"/jobs/"+job+"/ended")
	start := func(ctx context.Context, url string, logs logRecords) chan error {
		done := make(chan error, 1)
		env := weir.New(weir.Config{Job: job, Logger: slog.New(logs),
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 30 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: url, HATTL: 2 * time.Second}})
		src, err := generator.New(generator.Config[int64]{Count: count, RatePerSecond: 4000, BatchSize: 16, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[int64]{Dir: out, Format: func(dst []byte, v int64) []byte { return append(strconv.AppendInt(dst, v, 10), '\n') }})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(weir.Source(env, "numbers", src), "out", sink)
		go func() {
			_, err := env.Execute(ctx)
			done <- err
		}()
		return done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	alogs := newLogRecords()
	adone := start(ctx, "etcd://"+p.addr()+reviewPrefix, alogs)
	waitLog(t, alogs, "INFO checkpoint completed", 20*time.Second)
	p.armed.Store(true)
	blogs := newLogRecords()
	bdone := start(ctx, r.url, blogs)
	aerr := waitDone(t, adone)
	if p.hits.Load() == 0 {
		t.Skipf("no blip (the leader returned %v)", aerr)
	}
	berr := waitDone2(t, bdone, 60*time.Second)
	t.Logf("leader: %v; standby: %v", aerr, berr)
	m := committedNumbers(t, out)
	var missing, dup []int64
	for i := int64(0); i < count; i++ {
		switch m[i] {
		case 0:
			missing = append(missing, i)
		case 1:
		default:
			dup = append(dup, i)
		}
	}
	if len(missing) > 0 || len(dup) > 0 {
		t.Errorf("after a finished job's end blipped: %d missing (%v), %d duplicated (%v)", len(missing), head(missing), len(dup), head(dup))
	}
	if v, ok := r.ended(job); !ok || v != "finished" {
		t.Errorf("etcd's end: %q %v", v, ok)
	}
}

// TestHAResignedProcessRefusesCancel: a leader whose run fails at start
// (retryable: here etcd records a checkpoint its listing lacks) resigns
// and waits 5 s to 5 min before it campaigns again. It stands by through
// that wait, and its API refuses a cancel. A review of note 131's first
// version (session 36) found it took the cancel (202), returned, and
// recorded nothing in etcd: the job was not cancelled.
func TestHAResignedProcessRefusesCancel(t *testing.T) {
	r := newHARig(t)
	const job = "retrywait"
	c, err := ha.Dial(ha.Config{Endpoints: r.etcd.Hosts(), Prefix: reviewPrefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	newest := func() int {
		ps, err := c.Completed(context.Background(), job)
		if err != nil || len(ps) == 0 {
			return 0
		}
		return int(ps[len(ps)-1].ID)
	}
	start := func(ctx context.Context, fs vfs.FS) *haProc {
		return startHA(t, ctx, weir.Config{Job: job, Web: "127.0.0.1:0", WebToken: "tok",
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, FS: fs, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
	}
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	a := start(actx, vfs.Default)
	waitFor(t, "a completed checkpoint in etcd", 30*time.Second, func() bool { return newest() > 0 })
	acancel()
	waitDone(t, a.done)

	fs := &staleListFS{FS: vfs.Default, jobDir: filepath.Join(r.ckpt, job)}
	fs.hide.Store(fmt.Sprintf("chk-%d", newest()))
	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	b := start(bctx, fs)
	addr := <-b.web
	waitLog(t, b.logs, "WARN the run failed at start; standing by again", 30*time.Second)

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/cancel", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("POST /api/v1/cancel to a process that had resigned (its start failed): %s %s, want 409", resp.Status, strings.TrimSpace(string(body)))
	}
	select {
	case err := <-b.done:
		t.Fatalf("the process ended after a cancel it refused: %v", err)
	default:
	}
}

// haProc is a process of an HA test: its log, the address its web UI
// serves on (if it serves one), and how its run ended.
type haProc struct {
	logs logRecords
	done chan error
	web  chan string
}

// startHA runs an endless job with cfg (its logger set, and OnWeb if it
// serves a web UI) until ctx ends.
func startHA(t *testing.T, ctx context.Context, cfg weir.Config) *haProc {
	t.Helper()
	x := &haProc{logs: newLogRecords(), done: make(chan error, 1), web: make(chan string, 1)}
	cfg.Logger = slog.New(x.logs)
	if cfg.Web != "" {
		cfg.OnWeb = func(a string) { x.web <- a }
	}
	env := weir.New(cfg)
	if err := endless(env); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := env.Execute(ctx)
		x.done <- err
	}()
	return x
}
