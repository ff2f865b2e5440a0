package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41cBoundedSourceEndsWhenRetentionDeletesItsUnreadRecords: a
// bounded source (End = 10 in each partition) falls behind; retention
// (DeleteRecords stands for it) deletes every record it had not read, so
// each log now starts at its End. A restore in this state ends at once
// (skipDeleted moves Next to min(log start, End): TestRev5BoundedEndBelowLogStartEnds),
// and a running unbounded source reads on (TestRetentionWhileRunningDoesNotFailTheJob).
// A running bounded source is never exhausted: franz-go resets its fetch
// offset to the log start (10) without delivering a record, and s.Next
// advances only on a delivered record, so done() stays false until
// someone produces more. The job hangs, silently. Now the read looks for
// deleted records when it fetches nothing (passDeleted): it ends, warns,
// and reads what retention left (partition 0 keeps 6 of its 10 records,
// partition 2 all of them).
func TestS41cBoundedSourceEndsWhenRetentionDeletesItsUnreadRecords(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "lines"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produce(t, brokers, "lines", "", values("a", 30)...) // 10 per partition
	release := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Bounded: true})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	defer run.Close()
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: "lines", Partition: 0, At: 4})
	del.Add(kadm.Offset{Topic: "lines", Partition: 1, At: 10})
	resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	var got collected
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := r.Read(&got)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if res.Exhausted {
			if len(got) != 16 || !bytes.Contains(logs.Bytes(), []byte("retention deleted them")) {
				t.Fatalf("read %d records, want 16 (the 6 of partition 0 and the 10 of partition 2 retention left), with a warning; log:\n%s", len(got), logs.String())
			}
			break
		}
		if time.Now().After(deadline) {
			rd := r.(*reader[string])
			var at []int64
			for p := range int32(3) {
				if s := rd.splits[tp{"lines", p}]; s != nil {
					at = append(at, s.Next, s.End)
				}
			}
			t.Fatalf("bounded source not exhausted 10 s after retention deleted the records up to its end offsets (read %d; Next,End per partition %v); it waits for records that can no longer come.\nlog:\n%s", len(got), at, logs.String())
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
}
