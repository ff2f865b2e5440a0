package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// withRecords is a broker with 50 records in topic one, partition 0.
func withRecords(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "one"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	produce(t, c.ListenAddrs(), "one", "", values("r", 50)...)
	return c
}

// consuming is a client of c that consumes topic one's partition 0.
func consuming(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := client(c.ListenAddrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{"one": {0: kgo.NewOffset().At(0)}})
	return cl
}

// TestCloseConsumerWhileFetching closes clients that have just begun to
// consume, some of them while their first fetch is in flight. With
// franz-go's Close alone (v1.22.3) the race detector finds Close reading a
// broker's fetch session that a fetch started by the metadata loop writes
// (CI failed TestMinPauseIsCountedInTheTransactionBound so; this loop found
// it in every run of 3 × 300 clients); closeConsumer stops consuming first.
// Without -race it checks only that each client ends.
func TestCloseConsumerWhileFetching(t *testing.T) {
	c := withRecords(t)
	n := 300
	if !raceEnabled {
		n = 30
	}
	for i := range n {
		cl := consuming(t, c)
		if i%2 == 0 {
			cl.PollRecords(nil, 10)
		}
		closeConsumer(cl, map[string][]int32{"one": {0}})
	}
}

// TestCloseConsumerWhileMetadataHangs: a broker that stops answering does
// not hold up a consumer's close. Stopping consumption with
// PurgeTopicsFromConsuming waited for the metadata request in flight, about
// 30 s, which every Kafka source task added to a stop or a failover (found
// by an outside review); a plain Close takes under a millisecond. The bound
// is for a hang, far above either.
func TestCloseConsumerWhileMetadataHangs(t *testing.T) {
	c := withRecords(t)
	cl := consuming(t, c)
	cl.PollRecords(nil, 10)
	asked := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case asked <- struct{}{}:
		default:
		}
		return nil, nil, true // never answered
	})
	cl.ForceMetadataRefresh()
	<-asked
	start := time.Now()
	closeConsumer(cl, map[string][]int32{"one": {0}})
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("closing took %v while a metadata request hung", d)
	}
}
