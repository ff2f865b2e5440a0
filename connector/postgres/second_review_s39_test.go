package postgres

// Defects a second outside review of session 39's changes found, each
// fixed; a test's comment says what the defect did.

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestNoCheckpointsNeedNoPreparedSlots: without checkpoints an
// exactly-once sink prepares nothing: each subtask commits its
// transaction at the end of its input (Finish, a plain COMMIT). A server
// with max_prepared_transactions 2 (accepted by Sink) must then take a
// sink of parallelism 4. Open refuses it for good, asking for 8 prepared
// transactions it will never use.
func TestNoCheckpointsNeedNoPreparedSlots(t *testing.T) {
	pg := pgtest.Start(t, "max_prepared_transactions=2")
	newSink, err := Sink(SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	var want []string
	for sub := range 4 {
		s := newSink()
		if err := s.Open(noneContext(run, sub, 4, 1, false)); err != nil {
			s.Close()
			t.Fatalf("subtask %d of 4, without checkpoints, max_prepared_transactions 2: %v", sub, err)
		}
		w := string(rune('a' + sub))
		if err := s.Write(count{w, 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		want = append(want, w+"=1")
	}
	if got := rows(t, pg.URL); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
}
