package kafka

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestRefusedRunWritesNothing (outside review; at least once, none, and
// mode none): a second run of the job started without --restore over a
// topic that holds an earlier run's output. Its subtask 1 opens before
// subtask 0; when subtask 0 alone looked for an earlier run's record,
// subtask 1 wrote "world" and finished before subtask 0 refused the run,
// and resuming the earlier run wrote it a second time. Every subtask now
// refuses before it writes.
func TestRefusedRunWritesNothing(t *testing.T) {
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
			earlier := &operatortest.Run{}
			s, err := openAs(earlier, brokers, "test", c.d, 0, 1, false, c.checkpoints)
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
			s1, err := openAs(run, brokers, "test", c.d, 1, 2, false, c.checkpoints)
			if err == nil {
				s1.Write("world")
				if err := s1.Finish(); err != nil {
					t.Fatal(err)
				}
				s1.Close()
			}
			_, err = openAs(run, brokers, "test", c.d, 0, 2, false, c.checkpoints)
			wantRefused(t, "subtask 0 of the second run", err)
			if got := consume(t, brokers, "out", true); !slices.Equal(got, []string{"hello"}) {
				t.Fatalf("after the second run was refused, the topic holds %v, want only the earlier run's [hello]", got)
			}
		})
	}
}
