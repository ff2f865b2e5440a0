package writeahead

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// out is an output without transactions: it keeps what it was given.
type out struct {
	batches []Batch[string]
	fail    bool // the next write fails
}

func (o *out) write(_ context.Context, b Batch[string]) error {
	if o.fail {
		o.fail = false
		return errors.New("injected: endpoint down")
	}
	o.batches = append(o.batches, Batch[string]{Checkpoint: b.Checkpoint, Subtask: b.Subtask, Records: slices.Clone(b.Records)})
	return nil
}

func (o *out) records() []string {
	var all []string
	for _, b := range o.batches {
		all = append(all, b.Records...)
	}
	return all
}

func open(t *testing.T, fs vfs.FS, o *out, r *operator.Restore) (weir.SinkWriter[string], error) {
	t.Helper()
	newSink, err := Sink(Config[string]{Write: o.write, MarkerDir: "/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	return s, s.Open((&operatortest.Run{}).Context("print", 0, 1, r))
}

func snapshot(t *testing.T, s weir.SinkWriter[string], id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	async, err := s.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestWriteAtTheBarrier: a batch is written when its checkpoint completes;
// a restore writes the batches its checkpoint holds that have no marker,
// and only those.
func TestWriteAtTheBarrier(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	s, err := open(t, fs, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("a")
	s.Write("b")
	snapshot(t, s, 1, w)
	if len(o.batches) != 0 {
		t.Fatal("written before its checkpoint completed")
	}
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Write("c")
	snapshot(t, s, 2, w)
	s.Write("d")
	hs := snapshot(t, s, 3, w) // checkpoints 2 and 3 complete; the process dies before the notifications
	if got := o.records(); !slices.Equal(got, []string{"a", "b"}) || o.batches[0].Checkpoint != 1 {
		t.Fatalf("before the restore: %v", o.batches)
	}
	o.fail = true // the first write after the restore fails: the job restores again
	if _, err := open(t, fs, o, &operator.Restore{Checkpoint: 3, Handles: hs, Read: w.Read}); err == nil {
		t.Fatal("the failed write was not reported")
	}
	if _, err := open(t, fs, o, &operator.Restore{Checkpoint: 3, Handles: hs, Read: w.Read}); err != nil {
		t.Fatal(err)
	}
	if got := o.records(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("after the restore: %v", got)
	}
	// Restoring again writes nothing more: every batch is marked.
	if _, err := open(t, fs, o, &operator.Restore{Checkpoint: 3, Handles: hs, Read: w.Read}); err != nil || len(o.records()) != 4 {
		t.Fatalf("a second restore: %v, %v", err, o.records())
	}
}

// TestCrashBetweenWriteAndMarker: what remains of at-least-once is a crash
// between a batch's write and its marker, which repeats that one batch; a
// writer that is idempotent per checkpoint makes it harmless.
func TestCrashBetweenWriteAndMarker(t *testing.T) {
	mem := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	s, err := open(t, mem, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("a")
	hs := snapshot(t, s, 1, w)
	// The marker cannot be written: the process dies after the write.
	s.(*sink[string]).cfg.MarkerDir = "/no/such/dir"
	if err := s.NotifyComplete(1); err == nil {
		t.Fatal("the failed marker was not reported")
	}
	if _, err := open(t, mem, o, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}); err != nil {
		t.Fatal(err)
	}
	if len(o.batches) != 2 || o.batches[0].Checkpoint != o.batches[1].Checkpoint {
		t.Fatalf("batches %v; want the batch of checkpoint 1 twice, with its id both times", o.batches)
	}
}
