package kafka

// Two sinks given one transactional id prefix that start at the same
// moment (design note 136): both found the prefix free, both recorded it,
// and the second's start aborted the first's pre-committed transaction.

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestPrefixRecordedAtTheSameMoment: job b's sink reads the ownership
// topic and finds prefix "shared" free; before it records the prefix, job
// a's sink starts under it, records it and pre-commits checkpoint 1 (the
// hook runs between b's read and b's record). b must be refused, naming
// job a, and a's checkpoint must commit; the prefix must stay a's, so a
// third job is refused too, naming a.
func TestPrefixRecordedAtTheSameMoment(t *testing.T) {
	brokers := broker(t, "out", "out2", "out3")
	w := &operatortest.MemWriter{}
	var a weir.SinkWriter[string]
	hook := func() {
		beforePrefixRecord.Store(nil) // a's own start records at once
		a, _ = precommitted(t, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"}, w)
	}
	beforePrefixRecord.Store(&hook)
	t.Cleanup(func() { beforePrefixRecord.Store(nil) })

	runB := &operatortest.Run{}
	defer runB.Close()
	b, errB := openPrefixed(t, runB, brokers, sinkOf{job: "b", topic: "out2", prefix: "shared"})
	if b != nil {
		defer b.Close()
	}
	if a == nil {
		t.Fatal("job a did not start inside job b's start")
	}
	errA := a.NotifyComplete(1)
	if errB == nil || !strings.Contains(errB.Error(), `recorded at the same moment by sink "out" of job "a"`) || errA != nil {
		t.Fatalf("job b started under prefix \"shared\" as job a recorded it: b's start: %v; then a's commit of checkpoint 1: %v; want b refused, naming job a, and a's checkpoint committed", errB, errA)
	}
	got, err := readCommitted(brokers, "out")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n != 5 {
		t.Fatalf("job a's topic holds %v read_committed, want its checkpoint's 5 records", got)
	}

	runC := &operatortest.Run{}
	defer runC.Close()
	c, errC := openPrefixed(t, runC, brokers, sinkOf{job: "c", topic: "out3", prefix: "shared"})
	if c != nil {
		c.Close()
	}
	if errC == nil || !strings.Contains(errC.Error(), `belongs to sink "out" of job "a"`) {
		t.Fatalf("job c given the prefix after the race: %v, want a refusal naming job a (the prefix's last record must be a's again)", errC)
	}
}

// TestPrefixRacedByManySinks: three jobs' sinks start under one new prefix
// at once, in rounds with a prefix each: whatever the interleaving,
// exactly one must start, and a later sink must be refused naming it.
func TestPrefixRacedByManySinks(t *testing.T) {
	brokers := broker(t, "out")
	for round := range 8 {
		prefix := fmt.Sprintf("raced-%d", round)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				run := &operatortest.Run{}
				defer run.Close()
				s, err := openPrefixed(t, run, brokers, sinkOf{job: fmt.Sprintf("job%d", i), prefix: prefix})
				if s != nil {
					s.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: jobs %d and %d both started under prefix %q", round, winner, i, prefix)
			case err == nil:
				winner = i
			case !strings.Contains(err.Error(), "of job \"job"):
				t.Fatalf("round %d: job %d: %v, want a refusal naming the job that holds the prefix", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no job started under prefix %q: %v", round, prefix, errs)
		}
		run := &operatortest.Run{}
		s, err := openPrefixed(t, run, brokers, sinkOf{job: "late", prefix: prefix})
		if s != nil {
			s.Close()
		}
		run.Close()
		if want := fmt.Sprintf(`belongs to sink "out" of job "job%d"`, winner); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("round %d: a later job: %v, want a refusal that says the prefix %s", round, err, want)
		}
	}
}
