package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/s3test"
)

// fakeS3 is a checkpoint location on an S3 server in memory.
func fakeS3(t *testing.T) string { return s3test.Start(t).URL }

var memSeq atomic.Int64

// storages builds each kind of storage, with a way to list its shared
// files.
func storages(t *testing.T) map[string]func() (Storage, func() []string) {
	return map[string]func() (Storage, func() []string){
		"dir": func() (Storage, func() []string) {
			fs := vfs.NewMem()
			d, err := NewDir(fs, "/ckpt", "job", 0)
			if err != nil {
				t.Fatal(err)
			}
			return d, func() []string { return dirShared(t, d) }
		},
		"memory": func() (Storage, func() []string) {
			m := NewMemory(0)
			return m, func() []string {
				m.mu.Lock()
				defer m.mu.Unlock()
				return slices.Sorted(maps.Keys(m.files))
			}
		},
		"s3": func() (Storage, func() []string) {
			b, err := OpenBlob(context.Background(), fakeS3(t), "job")
			if err != nil {
				t.Fatal(err)
			}
			return b, func() []string { return blobShared(t, b) }
		},
		"mem://": func() (Storage, func() []string) {
			b, err := OpenBlob(context.Background(), fmt.Sprint("mem://shared-test-", memSeq.Add(1)), "job")
			if err != nil {
				t.Fatal(err)
			}
			return b, func() []string { return blobShared(t, b) }
		},
	}
}

func dirShared(t *testing.T, d *Dir) []string {
	t.Helper()
	var out []string
	root := d.fs.PathJoin(d.jobDir, SharedDir)
	ops, _ := d.fs.List(root)
	for _, op := range ops {
		names, err := d.fs.List(d.fs.PathJoin(root, op))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			out = append(out, SharedDir+"/"+op+"/"+n)
		}
	}
	slices.Sort(out)
	return out
}

func blobShared(t *testing.T, b *Blob) []string {
	t.Helper()
	keys, err := b.list(SharedDir + "/")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// referenced is the set of shared paths the completed checkpoints of s
// reference.
func referenced(t *testing.T, s Storage) []string {
	t.Helper()
	scan, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, m := range scan.Completed {
		for _, ts := range m.Tasks {
			for _, h := range ts.Handles {
				if IsShared(h) {
					set[h.Path] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func sharedFile(id checkpoint.ID, n int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("sst of %d #%d;", id, n)), 3000)
}

// incremental runs checkpoint id as an incremental backend does: it uploads
// two new files and references them with some of the files of the newest
// completed checkpoint (reuse). Every fifth never completes.
func incremental(t *testing.T, s Storage, id checkpoint.ID, confirmed []checkpoint.Handle, rng *rand.Rand) []checkpoint.Handle {
	t.Helper()
	if err := s.Reserve(id); err != nil {
		t.Fatal(err)
	}
	var hs []checkpoint.Handle
	for _, h := range confirmed {
		if rng.IntN(3) > 0 { // the others were compacted away
			hs = append(hs, h)
		}
	}
	for n := range 2 {
		h, err := s.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: fmt.Sprintf("%06d.sst", int(id)*10+n)}, bytes.NewReader(sharedFile(id, n)))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if id%5 == 0 {
		if err := s.Discard(id); err != nil { // aborted
			t.Fatal(err)
		}
		return confirmed
	}
	m := &checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}}
	if err := s.Commit(m); err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestSharedFilesGarbageCollection: after every checkpoint, with three
// retained, the shared files are exactly those the retained checkpoints
// reference: nothing leaks, nothing is missing, and each reads back.
func TestSharedFilesGarbageCollection(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, shared := open()
			if _, err := s.Scan(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var confirmed []checkpoint.Handle
			var retained []checkpoint.ID
			for id := checkpoint.ID(1); id <= 30; id++ {
				before := confirmed
				confirmed = incremental(t, s, id, confirmed, rng)
				if id%5 != 0 {
					if retained = append(retained, id); len(retained) > 3 {
						if err := s.Discard(retained[0]); err != nil {
							t.Fatal(err)
						}
						retained = retained[1:]
					}
				}
				if got, want := shared(), referenced(t, s); !slices.Equal(got, want) {
					t.Fatalf("after checkpoint %d: shared files %v, referenced %v", id, got, want)
				}
				_ = before
			}
			for _, h := range confirmed {
				data, err := s.ReadState(h)
				if err != nil || !strings.HasPrefix(string(data), "sst of") {
					t.Fatalf("%s: %v", h.Path, err)
				}
			}
		})
	}
}

// TestSharedFilesOfCheckpointsInFlightStay: a checkpoint in flight may
// reference a file of the newest completed one it knew of; when a newer
// one completes first and the older is discarded, the file stays until
// the one in flight settles.
func TestSharedFilesOfCheckpointsInFlightStay(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, shared := open()
			s.Scan()
			write := func(id checkpoint.ID, f string) checkpoint.Handle {
				h, err := s.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, strings.NewReader(f))
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			commit := func(id checkpoint.ID, hs ...checkpoint.Handle) {
				if err := s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}}); err != nil {
					t.Fatal(err)
				}
			}
			s.Reserve(1)
			a := write(1, "a")
			commit(1, a)
			s.Reserve(2) // in flight; will reference a
			s.Reserve(3)
			commit(3, write(3, "b"))
			s.Discard(1) // retention 1: a has no reference left, but 2 may add one
			if !slices.Contains(shared(), a.Path) {
				t.Fatal("a file a checkpoint in flight may reference was deleted")
			}
			commit(2, a)
			s.Discard(3)
			if got := shared(); !slices.Equal(got, []string{a.Path}) {
				t.Fatalf("shared %v, want only %s", got, a.Path)
			}
		})
	}
}

// TestSharedFileDeletedIsNeverCommitted: checkpoint 2 completes without
// a (it compacted it away) and retention subsumes 1, so a goes at once:
// nothing is in flight. A task not yet told that 2 completed builds 3 on
// 1 and references a. Storage refuses to commit 3, naming the file,
// rather than complete a checkpoint that cannot be restored; the refused
// checkpoint's own file goes with its discard.
func TestSharedFileDeletedIsNeverCommitted(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, shared := open()
			s.Scan()
			write := func(id checkpoint.ID, f string) checkpoint.Handle {
				h, err := s.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, strings.NewReader(f))
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			commit := func(id checkpoint.ID, hs ...checkpoint.Handle) error {
				return s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}})
			}
			s.Reserve(1)
			a := write(1, "a")
			if err := commit(1, a); err != nil {
				t.Fatal(err)
			}
			s.Reserve(2)
			b := write(2, "b")
			if err := commit(2, b); err != nil {
				t.Fatal(err)
			}
			s.Discard(1)
			s.Reserve(3)
			err := commit(3, a, write(3, "c"))
			if !errors.Is(err, ErrSharedGone) || !strings.Contains(err.Error(), a.Path) {
				t.Fatalf("commit of a checkpoint that references a deleted shared file: %v, want ErrSharedGone naming %s", err, a.Path)
			}
			if err := s.Discard(3); err != nil {
				t.Fatal(err)
			}
			if got := shared(); !slices.Equal(got, []string{b.Path}) {
				t.Fatalf("shared %v, want only %s", got, b.Path)
			}
			scan, err := s.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if latest := scan.Latest(); latest == nil || latest.ID != 2 {
				t.Fatalf("the newest completed checkpoint is %v, want 2", latest)
			}
		})
	}
}

// TestSharedFilesOfALateAcknowledgementStay: a waits for checkpoint 2, in
// flight when a lost its last reference. Checkpoint 3, also built on 1,
// was aborted, and its acknowledgement comes late: deleting the state it
// wrote must not delete a, which it only referenced and 2 still may.
func TestSharedFilesOfALateAcknowledgementStay(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, shared := open()
			s.Scan()
			write := func(id checkpoint.ID, f string) checkpoint.Handle {
				h, err := s.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, strings.NewReader(f))
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			commit := func(id checkpoint.ID, hs ...checkpoint.Handle) {
				if err := s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}}); err != nil {
					t.Fatal(err)
				}
			}
			s.Reserve(1)
			a := write(1, "a")
			commit(1, a)
			s.Reserve(2) // in flight, built on 1
			s.Reserve(3) // in flight, built on 1; aborted below
			s.Reserve(4)
			b := write(4, "b")
			commit(4, b)
			s.Discard(1) // a waits for 2 and 3
			s.Discard(3) // aborted
			late := write(3, "c")
			if err := s.DiscardState([]checkpoint.Handle{a, late}); err != nil {
				t.Fatal(err)
			}
			if got := shared(); !slices.Contains(got, a.Path) || slices.Contains(got, late.Path) {
				t.Fatalf("after the late acknowledgement of 3: shared %v, want %s kept and %s deleted", got, a.Path, late.Path)
			}
			commit(2, a, write(2, "d"))
			s.Discard(2)
			if got := shared(); !slices.Equal(got, []string{b.Path}) {
				t.Fatalf("shared %v, want only %s", got, b.Path)
			}
		})
	}
}

// TestSharedGCAfterACrashDuringDiscard: a crash at any point of a discard
// leaves no completed checkpoint with a file missing; the next start
// deletes what the crash left unreferenced.
func TestSharedGCAfterACrashDuringDiscard(t *testing.T) {
	for crashAt := int32(0); ; crashAt++ {
		mem := vfs.NewCrashableMem()
		d, err := NewDir(mem, "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		d.Scan()
		rng := rand.New(rand.NewPCG(3, 4))
		var confirmed []checkpoint.Handle
		for id := checkpoint.ID(1); id <= 4; id++ {
			confirmed = incremental(t, d, id, confirmed, rng)
		}
		var n int32
		armed := false
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if armed && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				if n++; n > crashAt {
					return errorfs.ErrInjected
				}
			}
			return nil
		})
		d2, _ := NewDir(errorfs.Wrap(mem, inj), "/ckpt", "job", 0)
		d2.Scan()
		armed = true
		discardErr := d2.Discard(1)
		after, _ := NewDir(mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(uint64(crashAt), 5))}), "/ckpt", "job", 0)
		scan, err := after.Scan()
		if err != nil {
			t.Fatal(err)
		}
		if err := after.RemoveOrphans(); err != nil {
			t.Fatal(err)
		}
		if got, want := dirShared(t, after), referenced(t, after); !slices.Equal(got, want) {
			t.Fatalf("crash at write %d of a discard: shared files %v, referenced %v", crashAt, got, want)
		}
		for _, m := range scan.Completed {
			for _, h := range m.Tasks[0].Handles {
				if _, err := after.ReadState(h); err != nil {
					t.Fatalf("crash at write %d of a discard: checkpoint %d lost %s: %v", crashAt, m.ID, h.Path, err)
				}
			}
		}
		if discardErr == nil {
			t.Logf("a discard takes %d writes; crashed after each", crashAt)
			return
		}
	}
}

// TestBlobRoundTrip: a checkpoint on S3 (gofakes3) reads back by its URL;
// a listing that lags does not hide the newest; a second run is refused
// while the first holds the lease.
func TestBlobRoundTrip(t *testing.T) {
	url := fakeS3(t)
	b, err := OpenBlob(context.Background(), url+"&lease=200ms", "job")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := OpenBlob(context.Background(), url+"&lease=200ms", "job")
	if _, err := b2.Lock(); err == nil || !strings.Contains(err.Error(), "in use by another run") {
		t.Fatalf("a second run while the first renews its lease: %v", err)
	}
	for id := checkpoint.ID(1); id <= 2; id++ {
		if err := takeCheckpoint(b, id); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.Scan()
	if err != nil || s.Latest() == nil || s.Latest().ID != 2 || s.MaxID != 2 {
		t.Fatalf("scan %+v %v", s, err)
	}
	checkReadable(t, b, s.Latest())
	m, st, err := OpenCheckpointURL(context.Background(), CheckpointLocation(url, "job", 1))
	if err != nil || m.ID != 1 {
		t.Fatalf("open checkpoint 1 by URL: %v", err)
	}
	checkReadable(t, st, m)
	r, err := st.OpenState(m.Tasks[0].Handles[0])
	if err != nil {
		t.Fatal(err)
	}
	streamed, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(streamed, stateOf(1)) {
		t.Fatal("streamed state differs")
	}
	lock.Close()
	if l, err := b2.Lock(); err != nil {
		t.Fatalf("after the first run let go: %v", err)
	} else {
		l.Close()
	}
	if err := b.Discard(1); err != nil {
		t.Fatal(err)
	}
	if s, _ := b.Scan(); len(s.Completed) != 1 || len(s.Incomplete) != 0 {
		t.Fatalf("after discarding 1: %+v", s)
	}
}
