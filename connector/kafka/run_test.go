package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/operator/operatortest"
)

// Run ids in the ownership records (issue 19, leftover 1 of the second
// session): a subtask that writes before subtask 0 opened is part of the
// running attempt, not an earlier run.

// TestSiblingThatWroteFirstIsNotAnEarlierRun: at least once, or without
// guarantees, or without checkpoints, subtask 1 of 2 writes its output
// (and its ownership record with it) and finishes before subtask 0 opens.
// Subtask 0 refused the run with ErrEarlierOutput. It must complete with
// every record once; a second run is still refused.
func TestSiblingThatWroteFirstIsNotAnEarlierRun(t *testing.T) {
	for _, c := range []struct {
		name        string
		d           Delivery
		checkpoints bool
	}{
		{"at-least-once", AtLeastOnce, true},
		{"none", NoGuarantee, true},
		{"mode none", ExactlyOnce, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			brokers := broker(t, "out")
			run := &operatortest.Run{}
			defer run.Close()
			s1, err := openAs(run, brokers, "test", c.d, 1, 2, false, c.checkpoints)
			if err != nil {
				t.Fatal(err)
			}
			s1.Write("world")
			if err := s1.Finish(); err != nil {
				t.Fatal(err)
			}
			s1.Close()
			wantCommitted(t, brokers, "after subtask 1", []string{"world"})

			s0, err := openAs(run, brokers, "test", c.d, 0, 2, false, c.checkpoints)
			if err != nil {
				t.Fatalf("subtask 0 took subtask 1's output for an earlier run's: %v", err)
			}
			s0.Write("hello")
			if err := s0.Finish(); err != nil {
				t.Fatal(err)
			}
			s0.Close()
			wantCommitted(t, brokers, "after the run", []string{"hello", "world"})

			_, err = openAs(&operatortest.Run{}, brokers, "test", c.d, 0, 2, false, c.checkpoints)
			wantRefused(t, "a second run", err)
		})
	}
}

// TestAtLeastOnceRestartAfterACheckpointIsNotRefused: at least once, the
// sink keeps no state, so the restart of a run after its first checkpoint
// (attempt 2, restoring that checkpoint) opens it without a Restore and
// not starting over. It was refused for the output attempt 1 wrote, and
// the job failed for good at its first failover.
func TestAtLeastOnceRestartAfterACheckpointIsNotRefused(t *testing.T) {
	brokers := broker(t, "out")
	run := &operatortest.Run{}
	defer run.Close()
	s, err := openAs(run, brokers, "test", AtLeastOnce, 0, 1, false, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("hello")
	if _, err := s.Snapshot(1); err != nil { // flushes; checkpoint 1 completes
		t.Fatal(err)
	}
	s.Close() // attempt 1 fails

	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, Delivery: AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	ctx := run.Context("out", 0, 1, nil) // the restored checkpoint holds no state of the sink
	ctx.Attempt = 2
	r := newSink()
	defer r.Close()
	if err := r.Open(ctx); err != nil {
		t.Fatalf("attempt 2 of the run: %v", err)
	}
	r.Write("world")
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
	wantCommitted(t, brokers, "after attempt 2", []string{"hello", "world"})
}

// TestOwnershipRecordWithoutARunIsAnEarlierRuns: a record an earlier
// version wrote (no run, no attempt) is an earlier run's, and a run that
// does not restore is refused for it.
func TestOwnershipRecordWithoutARunIsAnEarlierRuns(t *testing.T) {
	brokers := broker(t, "out", OwnersTopic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	old := `{"topic":"out","job":"test","uid":"out","subtask":0,"parallelism":1}`
	for _, r := range []*kgo.Record{
		{Topic: "out", Value: []byte("hello")},
		{Topic: OwnersTopic, Key: ownerKey("out", "test", "out"), Value: []byte(old)},
	} {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce} {
		_, err := openAs(&operatortest.Run{}, brokers, "test", d, 0, 2, false, true)
		wantRefused(t, "a run after a record without a run id", err)
	}
}

// TestEarlierRunsRecordBeforeThisRunsIsFound: an earlier run's record,
// followed by a record of this run (written by a subtask that did not look:
// here one told the run resumes, as every subtask of a restore is): the
// last record of the key is this run's, and a subtask that looks must still
// refuse for the one before it. Subtask 1 of a plain start, which looks
// too, is refused before it writes.
func TestEarlierRunsRecordBeforeThisRunsIsFound(t *testing.T) {
	brokers := broker(t, "out")
	earlier := &operatortest.Run{}
	s, err := openAs(earlier, brokers, "test", AtLeastOnce, 0, 1, false, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("hello")
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	earlier.Close()

	run := &operatortest.Run{}
	defer run.Close()
	_, err = openAs(run, brokers, "test", AtLeastOnce, 1, 2, false, true)
	wantRefused(t, "subtask 1 after an earlier run's record", err)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, Delivery: AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	s1 := newSink()
	ctx := run.Context("out", 1, 2, nil)
	ctx.Resumed = 1
	if err := s1.Open(ctx); err != nil {
		t.Fatal(err)
	}
	s1.Write("world")
	if err := s1.Finish(); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	_, err = openAs(run, brokers, "test", AtLeastOnce, 0, 2, false, true)
	wantRefused(t, "subtask 0 after an earlier run's record and its sibling's", err)
}

// TestRestoreWithoutStateIsNotRefused: at least once or with no guarantee
// the sink keeps no state, so a new run that restores a checkpoint
// (--restore latest; or one taken by an older version) gives it no Restore;
// Resumed says that the run resumes, and the output it finds is not an
// earlier run's (it was refused, with an error telling it to --restore
// latest).
func TestRestoreWithoutStateIsNotRefused(t *testing.T) {
	for _, d := range []Delivery{AtLeastOnce, NoGuarantee} {
		t.Run(d.String(), func(t *testing.T) {
			brokers := broker(t, "out")
			first := &operatortest.Run{}
			defer first.Close()
			s, err := openAs(first, brokers, "test", d, 0, 1, false, true)
			if err != nil {
				t.Fatal(err)
			}
			s.Write("hello")
			if _, err := s.Snapshot(1); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(); err != nil { // flushes what no guarantee has not yet
				t.Fatal(err)
			}
			s.Close()
			wantCommitted(t, brokers, "after the first run", []string{"hello"})

			second := &operatortest.Run{}
			defer second.Close()
			newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, Delivery: d})
			if err != nil {
				t.Fatal(err)
			}
			r := newSink()
			defer r.Close()
			ctx := second.Context("out", 0, 1, nil) // as the runtime: no Restore without state
			ctx.Resumed = 1
			if err := r.Open(ctx); err != nil {
				t.Fatalf("a new run restoring checkpoint 1: %v", err)
			}
		})
	}
}
