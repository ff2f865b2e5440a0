package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCloseConsumerWhileFetching closes clients that have just begun to
// consume, some of them while their first fetch is in flight. With
// franz-go's Close alone (v1.22.3) the race detector finds Close reading a
// broker's fetch session that a fetch started by the metadata loop writes
// (CI failed TestMinPauseIsCountedInTheTransactionBound so; this loop found
// it in every run of 3 × 300 clients); closeConsumer stops consuming first.
// Without -race it checks only that each client ends.
func TestCloseConsumerWhileFetching(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "one"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produce(t, c.ListenAddrs(), "one", "", values("r", 50)...)
	n := 300
	if !raceEnabled {
		n = 30
	}
	for i := range n {
		cl, err := client(c.ListenAddrs(), nil)
		if err != nil {
			t.Fatal(err)
		}
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{"one": {0: kgo.NewOffset().At(0)}})
		if i%2 == 0 {
			cl.PollRecords(nil, 10)
		}
		closeConsumer(cl)
	}
}
