package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var task = checkpoint.TaskID{Vertex: "count", Subtask: 0}

func handle() checkpoint.Handle {
	return checkpoint.Handle{Operator: "count", Subtask: 0, Parallelism: 1, Kind: "keyed", KeyGroups: keygroup.Range{First: 0, Last: 127}}
}

// stateOf is the state the test writes for checkpoint id: big enough for a
// file of its own.
func stateOf(id checkpoint.ID) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("state of %d;", id)), 4000)
}

var operators = []checkpoint.Operator{{UID: "count", Kind: "keyed-process", MaxParallelism: 128}, {UID: "source", Kind: "source", MaxParallelism: 128}}

// takeCheckpoint runs the writes of one checkpoint as a job does.
func takeCheckpoint(s Storage, id checkpoint.ID) error {
	if err := s.Reserve(id); err != nil {
		return err
	}
	h, err := s.WriteState(id, handle(), stateOf(id))
	if err != nil {
		return err
	}
	small, err := s.WriteState(id, checkpoint.Handle{Operator: "source", Parallelism: 1, Kind: "offsets"}, []byte("offset=7"))
	if err != nil {
		return err
	}
	return s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{
		{Task: task, Handles: []checkpoint.Handle{h}},
		{Task: checkpoint.TaskID{Vertex: "source"}, Handles: []checkpoint.Handle{small}},
	}})
}

// checkReadable asserts m's state reads back as written.
func checkReadable(t *testing.T, s Storage, m *checkpoint.Metadata) {
	t.Helper()
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			data, err := s.ReadState(h)
			if err != nil {
				t.Fatalf("checkpoint %d: %v", m.ID, err)
			}
			want := []byte("offset=7")
			if h.Kind == "keyed" {
				want = stateOf(m.ID)
			}
			if !bytes.Equal(data, want) {
				t.Fatalf("checkpoint %d: %s state reads back wrong", m.ID, h.Kind)
			}
		}
	}
}

func TestDirRoundTripAndLayout(t *testing.T) {
	fs := vfs.NewMem()
	d, err := NewDir(fs, "/ckpt", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(1); id <= 3; id++ {
		if err := takeCheckpoint(d, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Reserve(4); err != nil { // triggered, never completed
		t.Fatal(err)
	}
	s, err := d.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxID != 4 || len(s.Completed) != 3 || s.Latest().ID != 3 || fmt.Sprint(s.Incomplete) != "[4]" {
		t.Fatalf("scan: max %d, %d completed, incomplete %v", s.MaxID, len(s.Completed), s.Incomplete)
	}
	checkReadable(t, d, s.Latest())
	// The big state is a file of its own; the small one is inline.
	if p := s.Latest().Tasks[0].Handles[0].Path; p != "chk-3/count.0.keyed.kg0-127" {
		t.Fatalf("keyed state at %q", p)
	}
	if h := s.Latest().Tasks[1].Handles[0]; h.Path != "" || string(h.Inline) != "offset=7" {
		t.Fatalf("small state not inline: %+v", h)
	}
	// Discard removes exactly checkpoint 2's files.
	if err := d.Discard(2); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List("/ckpt/job")
	if strings.Contains(strings.Join(names, " "), "chk-2") {
		t.Fatalf("chk-2 still there: %v", names)
	}
	s, _ = d.Scan()
	if len(s.Completed) != 2 {
		t.Fatalf("after discard: %d completed", len(s.Completed))
	}
	for _, m := range s.Completed {
		checkReadable(t, d, m)
	}
}

func TestDirDamagedMetadataFallsBack(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func([]byte) []byte
		want error
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, checkpoint.ErrCorrupt},
		{"bit flip", func(b []byte) []byte { b[len(b)-3] ^= 1; return b }, checkpoint.ErrCorrupt},
		{"wrong version", func(b []byte) []byte { b[11] = 9; return b }, checkpoint.ErrVersion},
		{"empty", func(b []byte) []byte { return nil }, checkpoint.ErrCorrupt},
	} {
		t.Run(damage.name, func(t *testing.T) {
			fs := vfs.NewMem()
			d, _ := NewDir(fs, "/ckpt", "job", 0)
			for id := checkpoint.ID(1); id <= 2; id++ {
				if err := takeCheckpoint(d, id); err != nil {
					t.Fatal(err)
				}
			}
			path := "/ckpt/job/chk-2/_metadata"
			data, _ := readFile(fs, path, 1<<30)
			f, _ := fs.Create(path, vfs.WriteCategoryUnspecified)
			f.Write(damage.do(data))
			f.Close()
			s, err := d.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if s.Latest() == nil || s.Latest().ID != 1 {
				t.Fatalf("latest is %v, want the previous checkpoint 1", s.Latest())
			}
			if len(s.Damaged) != 1 || s.Damaged[0].Path != path || !errors.Is(s.Damaged[0].Err, damage.want) || !strings.Contains(s.Damaged[0].Err.Error(), path) {
				t.Fatalf("damage reported as %+v; want %v naming %s", s.Damaged, damage.want, path)
			}
		})
	}
}

// TestDirCrashBetweenAnyTwoWrites crashes the file system after every prefix
// of a checkpoint's operations and requires that storage then shows either
// the previous checkpoint or the new one, whole, and never garbage.
func TestDirCrashBetweenAnyTwoWrites(t *testing.T) {
	for crashAt := int32(0); ; crashAt++ {
		mem := vfs.NewCrashableMem()
		d, err := NewDir(mem, "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := takeCheckpoint(d, 1); err != nil {
			t.Fatal(err)
		}
		// From operation crashAt on, every operation fails, as after a
		// power cut; then the file system is cloned as a crash leaves it,
		// with some unsynced data kept at random.
		var n int32
		armed := false
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if armed && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				n++
				if n > crashAt {
					return errorfs.ErrInjected
				}
			}
			return nil
		})
		d2, err := NewDir(errorfs.Wrap(mem, inj), "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		armed = true
		err = takeCheckpoint(d2, 2)
		for _, pct := range []int{0, 50, 100} {
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(uint64(crashAt), 1))})
			after, _ := NewDir(crashed, "/ckpt", "job", 0)
			s, serr := after.Scan()
			if serr != nil {
				t.Fatalf("crash at write %d: scan: %v", crashAt, serr)
			}
			if len(s.Damaged) != 0 {
				t.Fatalf("crash at write %d (%d%% unsynced kept): damaged metadata %v", crashAt, pct, s.Damaged)
			}
			l := s.Latest()
			if l == nil || (l.ID != 1 && l.ID != 2) {
				t.Fatalf("crash at write %d: latest %v", crashAt, l)
			}
			if err == nil && pct == 0 && l.ID != 2 {
				t.Fatalf("crash after a successful commit lost checkpoint 2")
			}
			checkReadable(t, after, l)
		}
		if err == nil {
			t.Logf("checkpoint 2 takes %d write operations; crashed after each", crashAt)
			return
		}
	}
}

func TestDirStorageFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind errorfs.OpKind
		file string
	}{
		{"disk full while writing state", errorfs.OpFileWrite, "count.0.keyed"},
		{"failed metadata sync", errorfs.OpFileSync, "_metadata.tmp"},
		{"failed rename", errorfs.OpRename, "_metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			var on bool
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if on && op.Kind == tc.kind && strings.Contains(op.Path, tc.file) {
					return fmt.Errorf("%w: no space left on device", errorfs.ErrInjected)
				}
				return nil
			}))
			d, _ := NewDir(fs, "/ckpt", "job", 0)
			if err := takeCheckpoint(d, 1); err != nil {
				t.Fatal(err)
			}
			on = true
			err := takeCheckpoint(d, 2)
			if !errors.Is(err, errorfs.ErrInjected) || !strings.Contains(err.Error(), "checkpoint 2") {
				t.Fatalf("error %v; want the injected one, naming checkpoint 2", err)
			}
			on = false
			s, _ := d.Scan()
			if s.Latest().ID != 1 || len(s.Damaged) != 0 {
				t.Fatalf("after a failed checkpoint: latest %d, damaged %v", s.Latest().ID, s.Damaged)
			}
			// The storage recovers: the next checkpoint completes.
			if err := takeCheckpoint(d, 3); err != nil {
				t.Fatal(err)
			}
			s, _ = d.Scan()
			checkReadable(t, d, s.Latest())
		})
	}
}

func TestDirRejectsEscapingStatePath(t *testing.T) {
	d, _ := NewDir(vfs.NewMem(), "/ckpt", "job", 0)
	h := handle()
	h.Path = "../other/chk-1/x"
	if _, err := d.ReadState(h); err == nil {
		t.Fatal("read a state path outside the checkpoint directory")
	}
	if _, err := NewDir(vfs.NewMem(), "/ckpt", "../x", 0); err == nil {
		t.Fatal("accepted a job name with a path separator")
	}
}

func TestMemoryBoundsStateSize(t *testing.T) {
	m := NewMemory(1024)
	_, err := m.WriteState(1, handle(), make([]byte, 2048))
	if !errors.Is(err, ErrStateTooLarge) || !strings.Contains(err.Error(), "count subtask 0") || !strings.Contains(err.Error(), "checkpoint directory") {
		t.Fatalf("error %v; want ErrStateTooLarge naming the operator and the fix", err)
	}
	if err := takeCheckpoint(NewMemory(0), 1); err != nil {
		t.Fatal(err)
	}
	mem := NewMemory(0)
	for id := checkpoint.ID(1); id <= 2; id++ {
		if err := takeCheckpoint(mem, id); err != nil {
			t.Fatal(err)
		}
	}
	mem.Discard(1)
	s, _ := mem.Scan()
	if s.MaxID != 2 || len(s.Completed) != 1 || s.Latest().ID != 2 {
		t.Fatalf("memory scan %+v", s)
	}
	checkReadable(t, mem, s.Latest())
}

// TestMemoryRefusesOversizedMetadata: memory storage keeps state inside the
// metadata; metadata beyond its bound is an error that aborts the
// checkpoint and says which bound was hit, not a panic.
func TestMemoryRefusesOversizedMetadata(t *testing.T) {
	mem := NewMemory(0)
	m := &checkpoint.Metadata{Job: "job", ID: 1, Triggered: t0, Operators: operators}
	for i := range 14 {
		h := checkpoint.Handle{Operator: "count", Subtask: i, Parallelism: 14, Kind: "keyed"}
		h, err := mem.WriteState(1, h, make([]byte, 49<<20/10))
		if err != nil {
			t.Fatal(err)
		}
		m.Tasks = append(m.Tasks, checkpoint.TaskState{Task: checkpoint.TaskID{Vertex: "count", Subtask: i}, Handles: []checkpoint.Handle{h}})
	}
	err := mem.Commit(m)
	if !errors.Is(err, checkpoint.ErrTooLarge) || !strings.Contains(err.Error(), "64 MiB") || !strings.Contains(err.Error(), "checkpoint directory") {
		t.Fatalf("commit of %d MiB of inline state: %v", 14*49/10, err)
	}
	if s, _ := mem.Scan(); len(s.Completed) != 0 {
		t.Fatal("the refused checkpoint is listed as completed")
	}
}

// TestDirDiscardCrashLeavesNoHalfCheckpoint crashes the file system after
// every prefix of a discard's operations: the checkpoint is then either
// whole and readable, or not completed at all.
func TestDirDiscardCrashLeavesNoHalfCheckpoint(t *testing.T) {
	for crashAt := int32(0); ; crashAt++ {
		mem := vfs.NewCrashableMem()
		d, _ := NewDir(mem, "/ckpt", "job", 0)
		if err := takeCheckpoint(d, 1); err != nil {
			t.Fatal(err)
		}
		var n int32
		armed := false
		d2, err := NewDir(errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if armed && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				if n++; n > crashAt {
					return errorfs.ErrInjected
				}
			}
			return nil
		})), "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		armed = true
		err = d2.Discard(1)
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		after, _ := NewDir(crashed, "/ckpt", "job", 0)
		s, serr := after.Scan()
		if serr != nil {
			t.Fatal(serr)
		}
		if l := s.Latest(); l != nil {
			checkReadable(t, after, l)
		}
		if err == nil {
			if len(s.Completed) != 0 {
				t.Fatalf("checkpoint 1 still completed after its discard")
			}
			t.Logf("a discard takes %d write operations; crashed after each", crashAt)
			return
		}
	}
}

// TestDirDiscardWaitsForWriters: the discard of an aborted checkpoint waits
// for its state writes in flight, then leaves nothing; later writes fail.
func TestDirDiscardWaitsForWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		inWrite := make(chan struct{})
		mem := vfs.NewMem()
		d, _ := NewDir(errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpFileWrite && strings.Contains(op.Path, "chk-5/") {
				close(inWrite)
				<-release
			}
			return nil
		})), "/ckpt", "job", 0)
		if err := d.Reserve(5); err != nil {
			t.Fatal(err)
		}
		wrote := make(chan error, 1)
		go func() {
			_, err := d.WriteState(5, handle(), stateOf(5))
			wrote <- err
		}()
		<-inWrite
		discarded := make(chan error, 1)
		go func() { discarded <- d.Discard(5) }()
		synctest.Wait()
		select {
		case err := <-discarded:
			t.Fatalf("the discard did not wait for the write in flight: %v", err)
		default:
		}
		close(release)
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		if err := <-discarded; err != nil {
			t.Fatal(err)
		}
		if names, _ := mem.List("/ckpt/job"); slices.Contains(names, "chk-5") {
			t.Fatalf("chk-5 left behind: %v", names)
		}
		if _, err := d.WriteState(5, handle(), stateOf(5)); err == nil {
			t.Fatal("a write after the discard succeeded")
		}
	})
}

func TestDirLockExcludesASecondRun(t *testing.T) {
	dir := t.TempDir()
	a, _ := NewDir(vfs.Default, dir, "job", 0)
	b, _ := NewDir(vfs.Default, dir, "job", 0)
	l, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := b.Lock(); err == nil || !strings.Contains(err.Error(), "checkpoint directory "+a.JobDir()) || !strings.Contains(err.Error(), "process") {
		t.Fatalf("second lock: %v", err)
	}
	// The lock file is not a checkpoint.
	if s, err := b.Scan(); err != nil || s.MaxID != 0 || len(s.Damaged) != 0 {
		t.Fatalf("scan with a lock file: %+v %v", s, err)
	}
}
