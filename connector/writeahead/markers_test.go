package writeahead

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestStaleMarkerOfAnEarlierRunSkipsNoBatch (found by an outside review, session 35): a run that starts from
// nothing (a fresh start: --fresh, or storage emptied) numbers its
// checkpoints from 1 again when storage holds none. The marker an earlier
// run left says "written up to 3"; the new run's checkpoint 1 completes, its
// first write fails transiently (the notification fails the task), and the
// failover restores checkpoint 1: the batch of checkpoint 1 must be written.
func TestStaleMarkerOfAnEarlierRunSkipsNoBatch(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	newSink, err := Sink(Config[string]{Write: o.write, MarkerDir: "/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	// Run A: three checkpoints, each written and marked.
	runA := &operatortest.Run{Lineage: "A"}
	a := newSink()
	if err := a.Open(runA.Context("print", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	for id := range 3 {
		a.Write("old")
		snapshot(t, a, ckpt(id+1), w)
		if err := a.NotifyComplete(ckpt(id + 1)); err != nil {
			t.Fatal(err)
		}
	}
	// Run B starts over (no restore): its checkpoint ids begin at 1 again.
	runB := &operatortest.Run{Lineage: "B"}
	ctx := runB.Context("print", 0, 1, nil)
	ctx.StartOver = true
	b := newSink()
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	b.Write("new")
	hs := snapshot(t, b, 1, w)
	o.fail = true // the endpoint is down for a moment: the task fails, the job restores checkpoint 1
	if err := b.NotifyComplete(1); err == nil {
		t.Fatal("the failed write was not reported")
	}
	c := newSink()
	if err := c.Open(runB.Context("print", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(o.records(), ","), "new"); n != 1 {
		t.Fatalf("record of run B written %d times, want 1 (all batches: %v)", n, o.batches)
	}
}

// TestTwoJobsSharingAMarkerDirectory (found by an outside review, session 35): two jobs (each with a sink
// UID "print", the default-looking name) keep their markers in one
// directory, e.g. a shared checkpoint root. One job's marker must not
// make the other skip a batch; or the configuration must be refused.
func TestTwoJobsSharingAMarkerDirectory(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	oX, oY := &out{}, &out{}
	newX, err := Sink(Config[string]{Write: oX.write, MarkerDir: "/shared/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	newY, err := Sink(Config[string]{Write: oY.write, MarkerDir: "/shared/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ctxX := (&operatortest.Run{Lineage: "X"}).Context("print", 0, 1, nil)
	ctxX.Job = "jobx"
	runY := &operatortest.Run{Lineage: "Y"}
	ctxY := runY.Context("print", 0, 1, nil)
	ctxY.Job = "joby"
	x, y := newX(), newY()
	if err := x.Open(ctxX); err != nil {
		t.Fatal(err)
	}
	if err := y.Open(ctxY); err != nil {
		t.Fatal(err)
	}
	y.Write("y1")
	hs := snapshot(t, y, 1, w) // job Y: checkpoint 1 completes; its process dies before the notification
	for id := range 5 {        // job X runs on
		x.Write("x")
		snapshot(t, x, ckpt(id+1), w)
		if err := x.NotifyComplete(ckpt(id + 1)); err != nil {
			t.Fatal(err)
		}
	}
	ctxY2 := runY.Context("print", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
	ctxY2.Job = "joby"
	if err := newY().Open(ctxY2); err != nil {
		t.Fatal(err)
	}
	if got := oY.records(); !slices.Equal(got, []string{"y1"}) {
		t.Fatalf("job Y wrote %v after its restore, want [y1]: job X's marker hid its batch", got)
	}
}

// TestRestoringAnOlderCheckpointSaysOutputRepeats (found by an outside review, session 35): restoring
// checkpoint 1 when batches up to 3 were written writes the records of
// checkpoints 2 and 3 again (the output has no transactions to roll
// back). The runtime logs "sinks roll back what they committed"; this
// sink must at least say it cannot (or refuse).
func TestRestoringAnOlderCheckpointSaysOutputRepeats(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	newSink, err := Sink(Config[string]{Write: o.write, MarkerDir: "/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s := newSink()
	if err := s.Open(run.Context("print", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	s.Write("a")
	hs1 := snapshot(t, s, 1, w)
	for id := 1; id <= 3; id++ {
		if id > 1 {
			s.Write("later")
			snapshot(t, s, ckpt(id), w)
		}
		if err := s.NotifyComplete(ckpt(id)); err != nil {
			t.Fatal(err)
		}
	}
	err = newSink().Open(run.Context("print", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs1, Read: w.Read}))
	if err == nil && !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("restoring checkpoint 1 after checkpoint 3's batch was written: no error and no warning (logs %q); the records of checkpoints 2 and 3 will be written twice", logs.String())
	}
}

func ckpt(n int) checkpoint.ID { return checkpoint.ID(n) }

// TestRemovedMarkerDirectoryRepeatsNoBatch (found by an outside review, session 35): the marker
// directory is made once, when the job is built. Removed while the job
// runs (a cleanup, a remounted volume), every mark fails; each restore
// writes the batch again and fails at its marker again, so the output gets
// the batch once per restart, without end. At most one repeat is
// documented (a crash between a write and its marker).
func TestRemovedMarkerDirectoryRepeatsNoBatch(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	// The job is built once (Sink); each attempt opens new subtasks from it.
	newSink, err := Sink(Config[string]{Write: o.write, MarkerDir: "/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	s := newSink()
	if err := s.Open(run.Context("print", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	s.Write("a")
	hs := snapshot(t, s, 1, w)
	if err := fs.RemoveAll("/markers"); err != nil {
		t.Fatal(err)
	}
	err = s.NotifyComplete(1)
	t.Logf("notify: %v", err)
	for range 3 { // the restart strategy restores checkpoint 1, three times
		err = newSink().Open(run.Context("print", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}))
		t.Logf("restore: %v", err)
	}
	if n := len(o.records()); n > 2 {
		t.Fatalf("record written %d times over 3 restores (last error: %v)", n, err)
	}
}
