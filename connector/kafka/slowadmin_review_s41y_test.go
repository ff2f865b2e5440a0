package kafka

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41yBoundedReadThatFetchesNothingDoesNotBlockOnTheAdmin: a bounded
// source whose fetches bring nothing (a broker that is slow or cut off:
// here the fetch is held) looks for records retention deleted, listing the
// log start offsets once a second (passDeleted). The first version listed
// on the task's goroutine, in Read, waiting up to the source's Timeout (10
// s by default), and the task drained no mailbox meanwhile: no checkpoint
// barrier, no cancel, no stop with a savepoint. Now the listing runs
// beside Read: here the broker holds it until the Reads are done, and they
// must return meanwhile.
func TestS41yBoundedReadThatFetchesNothingDoesNotBlockOnTheAdmin(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "lines"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produce(t, brokers, "lines", "", values("a", 10)...)
	release, answer := make(chan struct{}), make(chan struct{})
	defer close(release)
	var held, slow atomic.Bool
	var lists atomic.Int32
	var answered sync.Once
	defer answered.Do(func() { close(answer) })
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if held.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() {
			lists.Add(1)
			c.SleepControl(func() { <-answer }) // the broker answers once the test has read on
		}
		return nil, nil, false
	})
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Bounded: true})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	slow.Store(true)
	// Reads that fetch nothing, across the check's interval, while the
	// broker holds the listing: each must return.
	read := make(chan error, 1)
	go func() {
		var got collected
		for until := time.Now().Add(2 * deletedCheckInterval); time.Now().Before(until); {
			res, err := r.Read(&got)
			if err != nil {
				read <- err
				return
			}
			time.Sleep(time.Until(res.IdleUntil)) // the task's pace
		}
		read <- nil
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
		if lists.Load() == 0 {
			t.Fatal("the Reads listed no offsets: the check did not run")
		}
	case <-time.After(time.Minute):
		answered.Do(func() { close(answer) })
		<-read
		t.Fatal("a Read that fetched nothing waited for ListStartOffsets (passDeleted) on the task's goroutine, which takes no barrier or cancel meanwhile")
	}
}
