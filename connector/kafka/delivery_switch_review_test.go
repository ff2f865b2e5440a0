package kafka

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestDeliverySwitchFromExactlyOnceIsRefused (outside review): checkpoint 2
// of an exactly-once run completes and the process dies before the
// notification, so checkpoint 2 records a pre-committed transaction holding
// "b". A new run restores checkpoint 2 with the sink at least once (or with
// no guarantee). Its Open returned right after the ownership check: it
// neither committed that transaction nor aborted the one the dead run left
// open, so "b" was lost at the broker's timeout and read_committed
// consumers stalled meanwhile. The switch is now refused, naming it.
func TestDeliverySwitchFromExactlyOnceIsRefused(t *testing.T) {
	for _, d := range []Delivery{AtLeastOnce, NoGuarantee} {
		t.Run(d.String(), func(t *testing.T) {
			brokers := broker(t, "out")
			w := &operatortest.MemWriter{}
			run := &operatortest.Run{}
			s := sinkFor(t, run, brokers, 0, 1, nil)
			s.Write("a")
			snapshot(t, s, 1, w)
			if err := s.NotifyComplete(1); err != nil {
				t.Fatal(err)
			}
			s.Write("b")
			hs := snapshot(t, s, 2, w) // completes; the process dies before the notification
			s.Write("c")               // after barrier 2: written again after a restore
			s.Close()
			run.Close()

			run = &operatortest.Run{}
			defer run.Close()
			newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, Delivery: d})
			if err != nil {
				t.Fatal(err)
			}
			r := newSink()
			defer r.Close()
			err = r.Open(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read}))
			if err != nil {
				if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "records transactions of exactly-once delivery") {
					t.Fatalf("restore of an exactly-once checkpoint %s: %v, want a permanent refusal of the switch", d, err)
				}
				return
			}
			want := []string{"a", "b"}
			deadline := time.Now().Add(3 * time.Second)
			got := consume(t, brokers, "out", true)
			for !slices.Equal(got, want) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond) // polling for the condition
				got = consume(t, brokers, "out", true)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("after restoring exactly-once checkpoint 2 %s: committed %v, want %v (stalled: %v): checkpoint 2's transaction was neither committed nor the switch refused",
					d, got, want, stalled(t, brokers, "out"))
			}
		})
	}
}
