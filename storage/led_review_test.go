package storage

// Outside review of storage.Led (issue 20, d35ea82..cd81d43). Each test
// states the defect it shows; they fail on cd81d43.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
)

// pausingFS holds the first List of a path ending in suffix, once armed,
// until release is closed: the process was paused (SIGSTOP, a VM freeze,
// a long GC) right there.
type pausingFS struct {
	vfs.FS
	suffix  string
	armed   atomic.Bool
	paused  chan struct{}
	release chan struct{}
}

func (p *pausingFS) List(dir string) ([]string, error) {
	if strings.HasSuffix(dir, p.suffix) && p.armed.CompareAndSwap(true, false) {
		close(p.paused)
		<-p.release
	}
	return p.FS.List(dir)
}

// TestReviewDeposedLeaderRemovesTheNextLeadersSharedFiles: "a deposed term
// deletes nothing (the next leader tidies)". But RemoveOrphans (and
// DiscardState) is fenced only by the term's local Err() before it starts:
// a leader paused inside it, after the check, resumes after the next
// leader has written and completed a checkpoint, and deletes that
// checkpoint's new shared files (its registry never heard of them). The
// next leader's latest completed checkpoint, recorded in etcd, then
// references missing files: its restore fails, and the job falls back to
// an older checkpoint whose sinks' output was committed since
// (duplicates), or cannot restore at all.
func TestReviewDeposedLeaderRemovesTheNextLeadersSharedFiles(t *testing.T) {
	c := haClient(t)
	fs := vfs.NewMem()
	pfs := &pausingFS{FS: fs, suffix: "/" + SharedDir, paused: make(chan struct{}), release: make(chan struct{})}
	dirA, err := NewDir(pfs, "/chk", "job", 0) // leader a's process
	if err != nil {
		t.Fatal(err)
	}
	dirB, err := NewDir(fs, "/chk", "job", 0) // leader b's process, same shared storage
	if err != nil {
		t.Fatal(err)
	}
	shared := func(s Storage, id checkpoint.ID, f string) checkpoint.Handle {
		h, err := s.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, strings.NewReader("sst "+f))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	commit := func(s Storage, id checkpoint.ID, hs ...checkpoint.Handle) {
		t.Helper()
		if err := s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}}); err != nil {
			t.Fatal(err)
		}
	}

	a := lead(t, c, "a")
	sa := Led(dirA, a)
	if _, err := sa.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := sa.Reserve(1); err != nil {
		t.Fatal(err)
	}
	one := shared(sa, 1, "000001.sst")
	commit(sa, 1, one)

	// a starts a run (decideStart ends with RemoveOrphans) and is paused
	// inside it, past the check of its term.
	pfs.armed.Store(true)
	removed := make(chan error, 1)
	go func() { removed <- sa.RemoveOrphans() }()
	<-pfs.paused
	if err := a.Resign(context.Background()); err != nil { // its lease runs out meanwhile
		t.Fatal(err)
	}

	b := lead(t, c, "b")
	defer b.Resign(context.Background())
	sb := Led(dirB, b)
	scan, err := sb.Scan()
	if err != nil || !slices.Equal(completedIDs(scan), []checkpoint.ID{1}) {
		t.Fatalf("b's scan: %v, %v", completedIDs(scan), err)
	}
	if err := sb.Reserve(2); err != nil {
		t.Fatal(err)
	}
	two := shared(sb, 2, "000002.sst")
	commit(sb, 2, one, two) // recorded in etcd: the job's restore point

	close(pfs.release) // a resumes
	err = <-removed
	t.Logf("the deposed leader's RemoveOrphans returned %v", err)
	for _, h := range []checkpoint.Handle{one, two} {
		if _, err := sb.ReadState(h); err != nil {
			t.Errorf("checkpoint 2, completed by the current leader, lost shared file %s to the deposed leader's RemoveOrphans: %v", h.Path, err)
		}
	}
}

// TestReviewDeletingAnEndedJobsKeysStartsOver: with --ha, weir refuses
// --fresh and says "to run an ended job again from the beginning, delete
// its keys: etcdctl del --prefix <prefix>/jobs/<job>/". Deleting them
// makes the next term the job's "first": Scan adopts every completed
// checkpoint in storage, and the leader (which always restores latest)
// restores the ended run's last checkpoint instead of starting from the
// beginning. The operator's re-run produces nothing (or the tail only).
func TestReviewDeletingAnEndedJobsKeysStartsOver(t *testing.T) {
	e := etcdtest.Start(t, 1)
	c, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	sa := Led(dir, a)
	if _, err := sa.Scan(); err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(1); id <= 2; id++ {
		if err := takeCheckpoint(sa, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.End(context.Background(), "finished"); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The operator follows the advice: the job's keys and its
	// checkpoints. (The first advice named the keys only: the next term
	// adopted the checkpoints and restored the last.)
	for id := checkpoint.ID(1); id <= 2; id++ {
		if err := dir.Discard(id); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Delete(context.Background(), ha.DefaultPrefix+"/jobs/job/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	b := lead(t, c, "b")
	defer b.Resign(context.Background())
	scan, err := Led(dir, b).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if m := scan.Latest(); m != nil {
		t.Errorf("after deleting the ended job's keys (to run it again from the beginning, as weir advises), the next leader's scan has latest checkpoint %d: the run restores it, it does not start from the beginning", m.ID)
	}
}

// TestReviewNewerCheckpointThanEtcdKnowsIsDeleted: a checkpoint whose id is
// above every id etcd ever handed out was not written by any term (each
// reserves its ids in etcd first): a run without --ha wrote it (an
// operator's `weir run --restore latest` on the same directory), and its
// sinks' output up to it is committed. The next leader's Scan lists it as
// incomplete, so the runtime deletes it at start and restores the older
// checkpoint etcd records: the non-HA run's interval is written again
// (duplicates), and its newest state is gone, without a word.
func TestReviewNewerCheckpointThanEtcdKnowsIsDeleted(t *testing.T) {
	c := haClient(t)
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	sa := Led(dir, a)
	if _, err := sa.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := takeCheckpoint(sa, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A run without high availability restores 1 and completes 2, 3.
	for id := checkpoint.ID(2); id <= 3; id++ {
		if err := takeCheckpoint(dir, id); err != nil {
			t.Fatal(err)
		}
	}
	b := lead(t, c, "b")
	defer b.Resign(context.Background())
	scan, err := Led(dir, b).Scan()
	if errors.Is(err, checkpoint.ErrCorrupt) || err != nil && !errors.Is(err, ErrUnavailable) {
		return // refused, saying why: fine
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range scan.Incomplete {
		if id > 1 {
			t.Errorf("checkpoint %d, completed in storage with an id above the last etcd handed out (1), is listed incomplete: the next leader deletes it and restores checkpoint %v", id, completedIDs(scan))
		}
	}
}

// TestReviewRunWithoutHAIsNotExcluded: Led's Lock is the term alone (the
// directory's lock file is not taken, since a paused leader would hold it).
// Before high availability, a second run of the job on the same checkpoint
// directory (a coordinator started without --ha by a unit file not
// updated, a `weir run --restore latest` during an incident) was refused
// by that lock. Now nothing refuses it: it restores the latest checkpoint
// in the directory (by its files, including a deposed leader's that etcd
// never recorded) and runs beside the leader: two coordinators acting at
// once on one storage and one set of sinks.
func TestReviewRunWithoutHAIsNotExcluded(t *testing.T) {
	c := haClient(t)
	dir, err := NewDir(vfs.NewMem(), "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	defer a.Resign(context.Background())
	held, err := Led(dir, a).Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	second, err := dir.Lock() // a run of the job without --ha
	if err == nil {
		second.Close()
		t.Error("while a leader runs the job (its term is the lock), a run without --ha took the checkpoint directory's lock: nothing keeps it from running beside the leader")
	}
}
