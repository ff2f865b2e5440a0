package storage

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
)

// lead campaigns for job "job" as name and returns the term.
// haClient is a client of a one-member etcd cluster of the test's own.
func haClient(t *testing.T) *ha.Client {
	t.Helper()
	e := etcdtest.Start(t, 1)
	c, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func lead(t *testing.T, c *ha.Client, name string) *ha.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Campaign(ctx, "job", name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func completedIDs(s Scan) []checkpoint.ID {
	var ids []checkpoint.ID
	for _, m := range s.Completed {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestLedStorage: with its checkpoints recorded in etcd, a job's restore
// point is what its current leader completed. A deposed leader can reserve
// no id, complete nothing and delete nothing; metadata it wrote before it
// learnt so is not a completed checkpoint to the next leader, which goes
// on with larger ids.
func TestLedStorage(t *testing.T) {
	c := haClient(t)
	fs := vfs.NewMem()
	dir, err := NewDir(fs, "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A checkpoint of a run without high availability is adopted.
	if err := takeCheckpoint(dir, 1); err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	sa := Led(dir, a)
	scan, err := sa.Scan()
	if err != nil || !slices.Equal(completedIDs(scan), []checkpoint.ID{1}) || scan.MaxID != 1 {
		t.Fatalf("before the job ran with etcd: completed %v, max id %d, %v: want [1], 1", completedIDs(scan), scan.MaxID, err)
	}
	lock, err := sa.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.(interface{ Held() error }).Held(); err != nil {
		t.Fatalf("the leader's lock: %v", err)
	}
	for id := checkpoint.ID(2); id <= 3; id++ {
		if err := takeCheckpoint(sa, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := sa.Discard(2); err != nil {
		t.Fatal(err)
	}
	// a writes checkpoint 4's metadata, and is deposed before it records
	// it in etcd (paused between the two).
	if err := sa.Reserve(4); err != nil {
		t.Fatal(err)
	}
	if err := takeCheckpoint(dir, 4); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := lock.(interface{ Held() error }).Held(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the deposed leader's lock: %v, want ErrLeaseLost", err)
	}
	if err := sa.Reserve(5); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the deposed leader reserved checkpoint 5: %v", err)
	}
	if err := sa.Commit(&checkpoint.Metadata{Job: "job", ID: 4, Triggered: t0, Operators: operators}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the deposed leader completed checkpoint 4: %v", err)
	}
	if err := sa.Discard(3); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the deposed leader deleted checkpoint 3: %v", err)
	}
	if err := sa.RemoveOrphans(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("the deposed leader removed orphans: %v", err)
	}

	b := lead(t, c, "b")
	defer b.Resign(context.Background())
	sb := Led(dir, b)
	scan, err = sb.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(completedIDs(scan), []checkpoint.ID{1, 3}) || !slices.Equal(scan.Incomplete, []checkpoint.ID{4}) || scan.MaxID != 4 {
		t.Fatalf("the next leader's scan: completed %v, incomplete %v, max id %d: want [1 3], [4], 4", completedIDs(scan), scan.Incomplete, scan.MaxID)
	}
	if m := scan.Latest(); m == nil || m.ID != 3 {
		t.Fatalf("latest %v: want 3", m)
	}
	checkReadable(t, sb, scan.Latest())
	if err := sb.Reserve(4); err == nil {
		t.Error("the next leader reserved checkpoint 4, which the deposed one had")
	}
	if err := takeCheckpoint(sb, 5); err != nil {
		t.Fatal(err)
	}
	// A recorded checkpoint storage does not show is neither absent nor
	// damaged: the scan fails, retryable, so that the run neither restores
	// an older one (rolling back committed output) nor deletes it and its
	// record (a listing may lag, or the storage may not be the job's).
	// Before (found by an outside review, session 36) it was damaged, and
	// the start restored checkpoint 3 and forgot 5 in etcd.
	if err := dir.Discard(5); err != nil {
		t.Fatal(err)
	}
	if _, err = sb.Scan(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "etcd records checkpoints [5] of job") {
		t.Fatalf("scan with checkpoint 5 recorded in etcd and gone from storage: %v, want ErrUnavailable naming it", err)
	}
	if ps, err := b.Completed(context.Background()); err != nil || len(ps) == 0 || ps[len(ps)-1].ID != 5 {
		t.Fatalf("etcd's completed checkpoints after the scan: %v, %v: want 5 still recorded", ps, err)
	}
	// Its metadata alone gone (the directory listed, as incomplete): the
	// same.
	if err := fs.MkdirAll("/chk/job/chk-5", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err = sb.Scan(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("scan with checkpoint 5's directory and no metadata: %v, want ErrUnavailable", err)
	}
}

// TestLedStorageEtcdUnreachable: when etcd cannot be reached, Scan fails
// with ErrUnavailable (it never reports what completed from the files
// alone), and a commit is not a completed checkpoint.
func TestLedStorageEtcdUnreachable(t *testing.T) {
	e := etcdtest.Start(t, 1)
	c, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), TTL: 2 * time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := lead(t, c, "a")
	s := Led(dir, l)
	if err := takeCheckpoint(s, 1); err != nil {
		t.Fatal(err)
	}
	e.Kill(0)
	if _, err := s.Scan(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("scan with etcd down: %v, want ErrUnavailable", err)
	}
	err = s.Commit(&checkpoint.Metadata{Job: "job", ID: 2, Triggered: t0, Operators: operators})
	if err == nil || !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrLeaseLost) {
		t.Errorf("commit with etcd down: %v, want ErrUnavailable or ErrLeaseLost", err)
	}
	<-l.Lost()
}

// BenchmarkCheckpointStorage measures what a checkpoint costs the
// coordinator in its storage (reserve, commit and discard an older one; no
// state): in a directory (in memory), and in one under a leader in etcd.
func BenchmarkCheckpointStorage(b *testing.B) {
	e := etcdtest.Start(b, 1)
	c, err := ha.Dial(ha.Config{Endpoints: e.Hosts()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	l, err := c.Campaign(ctx, "job", "a")
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	defer l.Resign(context.Background())
	for _, bc := range []struct {
		name string
		led  bool
	}{{"dir", false}, {"dir+etcd", true}} {
		b.Run(bc.name, func(b *testing.B) {
			dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
			if err != nil {
				b.Fatal(err)
			}
			var s Storage = dir
			if bc.led {
				s = Led(dir, l)
			}
			scan, err := s.Scan()
			if err != nil {
				b.Fatal(err)
			}
			id := scan.MaxID
			before := etcdRequests(b, e)
			for b.Loop() {
				id++
				if err := s.Reserve(id); err != nil {
					b.Fatal(err)
				}
				if err := s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators}); err != nil {
					b.Fatal(err)
				}
				if id > 2 {
					if err := s.Discard(id - 2); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(etcdRequests(b, e)-before)/float64(b.N), "etcd-requests/op")
		})
	}
}

// etcdRequests is how many requests etcd's key-value and lease services
// answered, by its metrics.
func etcdRequests(b *testing.B, e *etcdtest.Cluster) int {
	resp, err := http.Get(e.Endpoints()[0] + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_handled_total{") || !strings.Contains(line, `grpc_service="etcdserverpb.KV"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			b.Fatal(err)
		}
		n += int(v)
	}
	return n
}

// TestLedStorageRefusesRunsWithoutHA: once a term took the storage, a run
// without high availability (its own lock) is refused, saying why: in a
// directory and in object storage.
func TestLedStorageRefusesRunsWithoutHA(t *testing.T) {
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := OpenBlob(context.Background(), "mem://led?lease=1s", "job")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []interface {
		ledStorage
		Storage
	}{dir, blob} {
		if _, err := s.markLed([]byte("job job\n")); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Lock(); err == nil || !strings.Contains(err.Error(), "belongs to coordinators with high availability") {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: a run without --ha took the storage of a job under high availability: %v", s.Describe(), err)
		}
	}
}

// TestLedStorageRefusesAnotherEtcdNamespace: coordinators given another
// etcd prefix (or another etcd) elect a leader of their own; on the same
// storage both would run the job. The first term marks the storage with
// its namespace, and a term of another is refused, saying both; a later
// term of the same namespace is not. In a directory and in object
// storage, and when two namespaces mark the storage at once.
func TestLedStorageRefusesAnotherEtcdNamespace(t *testing.T) {
	e := etcdtest.Start(t, 1)
	dial := func(prefix string) *ha.Client {
		c, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), TTL: 2 * time.Second, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	blue, green := dial("/blue"), dial("/green")
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := OpenBlob(context.Background(), "mem://namespaces?lease=1s", "job")
	if err != nil {
		t.Fatal(err)
	}
	lb, lg := lead(t, blue, "b"), lead(t, green, "g")
	for _, s := range []Storage{dir, blob} {
		if _, err := Led(s, lb).Lock(); err != nil {
			t.Fatalf("%s: the first term: %v", s.Describe(), err)
		}
		_, err := Led(s, lg).Lock()
		if !errors.Is(err, ErrLedElsewhere) || !strings.Contains(err.Error(), lb.Namespace()) || !strings.Contains(err.Error(), lg.Namespace()) {
			t.Errorf("%s: a term of prefix /green took the storage that prefix /blue leads: %v", s.Describe(), err)
		}
		if _, err := Led(s, lb).Lock(); err != nil {
			t.Errorf("%s: a later term of the same namespace: %v", s.Describe(), err)
		}
	}
	// At once, on fresh storage: one of the two is refused.
	for round := range 20 {
		s, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, l := range []*ha.Leadership{lb, lg} {
			go func() {
				_, err := Led(s, l).Lock()
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) {
			t.Fatalf("round %d: two namespaces marked the storage at once: %v; %v (want one refused)", round, e1, e2)
		}
	}
}
