package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// openAs opens subtask sub of p of a sink writing to "out" as job, with
// delivery d, returning Open's error.
func openAs(run *operatortest.Run, brokers []string, job string, d Delivery, sub, p int, fresh, checkpoints bool) (weir.SinkWriter[string], error) {
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, Delivery: d})
	if err != nil {
		return nil, err
	}
	ctx := run.Context("out", sub, p, nil)
	ctx.Job, ctx.StartOver, ctx.CheckpointingEnabled = job, fresh, checkpoints
	s := newSink()
	if err := s.Open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// wantRefused checks that err is the refusal of a run that found an earlier
// run's output: permanent, and saying what and how to go on.
func wantRefused(t *testing.T, when string, err error) {
	t.Helper()
	if !errors.Is(err, ErrEarlierOutput) || !operator.IsPermanent(err) {
		t.Fatalf("%s: %v, want a permanent refusal for output an earlier run committed", when, err)
	}
	for _, want := range []string{`sink "out"`, `job "test"`, "topic out", "--restore latest", `Config.Restore "latest"`, "--fresh", "Config.Fresh"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, does not say %q", when, err, want)
		}
	}
}

// TestSinkRefusesToAddToAnEarlierRunsOutput (issue 19, defect 4): a run that
// neither restores nor starts over, and finds output an earlier run of the
// same job's sink committed into the topic, is refused — in every delivery
// mode, and in mode none (committed at the end of input) — and nothing of
// it is written. It used to add a second copy.
func TestSinkRefusesToAddToAnEarlierRunsOutput(t *testing.T) {
	for _, c := range []struct {
		name        string
		d           Delivery
		checkpoints bool
	}{
		{"exactly-once", ExactlyOnce, true},
		{"at-least-once", AtLeastOnce, true},
		{"none", NoGuarantee, true},
		{"mode none", ExactlyOnce, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			brokers := broker(t, "out")
			w := &operatortest.MemWriter{}
			run := &operatortest.Run{}
			defer run.Close()
			s, err := openAs(run, brokers, "test", c.d, 0, 2, false, c.checkpoints)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.d == ExactlyOnce && c.checkpoints:
				commitAt(t, s, 1, w, "hello")
			case c.d == AtLeastOnce:
				s.Write("hello")
				if _, err := s.Snapshot(1); err != nil { // flushes
					t.Fatal(err)
				}
			default:
				s.Write("hello")
				if err := s.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			wantCommitted(t, brokers, "after the first run", []string{"hello"})

			// Subtask 0 looks, at any parallelism.
			_, err = openAs(&operatortest.Run{}, brokers, "test", c.d, 0, 1, false, c.checkpoints)
			wantRefused(t, "second run", err)
			wantCommitted(t, brokers, "after the refused run", []string{"hello"})
		})
	}
}

// TestSinkOwnershipRecordCommitsWithTheOutput: a run killed before its
// first commit leaves nothing a later run is refused for; a run that
// starts over (--fresh) writes after the earlier output, which stays, and
// is then the one a later run is refused for; a restore, another job, or
// another sink UID on the same topic is not refused; a topic made again
// holds no earlier output.
func TestSinkOwnershipRecordCommitsWithTheOutput(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}

	run := &operatortest.Run{}
	s, err := openAs(run, brokers, "test", ExactlyOnce, 0, 1, false, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("lost")
	snapshot(t, s, 1, w) // flushed, never committed: kill -9
	s.Close()
	run.Close()

	run = &operatortest.Run{}
	if s, err = openAs(run, brokers, "test", ExactlyOnce, 0, 1, false, true); err != nil {
		t.Fatalf("a run after one that committed nothing: %v", err)
	}
	hs := commitAt(t, s, 1, w, "a")
	s.Close()
	run.Close()
	wantCommitted(t, brokers, "after the first commit", []string{"a"})

	// Another job, and another sink of this job, write the same topic.
	run = &operatortest.Run{}
	other, err := openAs(run, brokers, "other", ExactlyOnce, 0, 1, false, true)
	if err != nil {
		t.Fatalf("another job: %v", err)
	}
	commitAt(t, other, 1, w, "x")
	other.Write("y") // open: its transaction holds the ownership topic's read_committed readers back
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode})
	if err != nil {
		t.Fatal(err)
	}
	ctx := run.Context("out2", 0, 1, nil)
	s2 := newSink()
	if err := s2.Open(ctx); err != nil {
		t.Fatalf("another sink UID of the job: %v", err)
	}
	s2.Close()

	_, err = openAs(&operatortest.Run{}, brokers, "test", ExactlyOnce, 0, 1, false, true)
	wantRefused(t, "a second run while another job's transaction is open", err)
	commitAt(t, other, 2, w) // commits y
	other.Close()
	run.Close()

	run = &operatortest.Run{}
	r, err := restoreSink(run, brokers, 0, 1, 1, hs, w, 0)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	r.Close()
	run.Close()

	run = &operatortest.Run{}
	if s, err = openAs(run, brokers, "test", ExactlyOnce, 0, 1, true, true); err != nil {
		t.Fatalf("--fresh: %v", err)
	}
	commitAt(t, s, 1, w, "b")
	s.Close()
	run.Close()
	wantCommitted(t, brokers, "after --fresh", []string{"a", "b", "x", "y"})
	_, err = openAs(&operatortest.Run{}, brokers, "test", ExactlyOnce, 0, 1, false, true)
	wantRefused(t, "a run after --fresh", err)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopics(context.Background(), "out"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, "out"); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	run = &operatortest.Run{}
	defer run.Close()
	if s, err = openAs(run, brokers, "test", ExactlyOnce, 0, 1, false, true); err != nil {
		t.Fatalf("a run after the topic was made again: %v", err)
	}
	s.Close()
}

// TestOwnerKeysAreUnambiguous: job and UID are escaped, so that job "a:b"
// with UID "c" and job "a" with UID "b:c" (or any other split) own apart.
func TestOwnerKeysAreUnambiguous(t *testing.T) {
	keys := map[string]bool{}
	for _, k := range [][3]string{{"t", "a:b", "c"}, {"t", "a", "b:c"}, {"t", `a","b`, "c"}, {"t", "a", `b","c`}, {"t", "a\x00b", "c"}, {"t", "a", "b\x00c"}} {
		key := string(ownerKey(k[0], k[1], k[2]))
		if keys[key] {
			t.Fatalf("%q: key %s shared", k, key)
		}
		keys[key] = true
	}
}
