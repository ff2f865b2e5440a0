package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// holds? a partition discovered by its owner at parallelism 2 and read
// partly is read exactly once after a restore at 3.
func TestRev4DiscoveredPartitionAfterRescale(t *testing.T) {
	brokers := broker(t, "lines")
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, DiscoveryInterval: time.Millisecond,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	open := func(p int, rs *operator.Restore) []weir.SourceReader[string] {
		out := make([]weir.SourceReader[string], p)
		for sub := range p {
			out[sub] = newReader()
			if err := out[sub].Open(run.Context("kafka", sub, p, rs)); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	readers := open(2, nil)
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 2, "lines"); err != nil { // 3, 4
		t.Fatal(err)
	}
	pcl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer pcl.Close()
	put := func(prefix string) []string {
		var all []string
		var recs []*kgo.Record
		for p := int32(0); p < 5; p++ {
			for _, v := range values(prefix+string(rune('0'+p))+"-", 4) {
				recs = append(recs, &kgo.Record{Topic: "lines", Partition: p, Value: []byte(v)})
				all = append(all, v)
			}
		}
		if err := pcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return all
	}
	readAll := func(rs []weir.SourceReader[string], want []string) {
		var got collected
		for range 100 {
			for _, r := range rs {
				readFor(t, r, &got, 10*time.Millisecond)
			}
			if len(got) >= len(want) {
				break
			}
		}
		for _, r := range rs {
			readFor(t, r, &got, 50*time.Millisecond)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal([]string(got), want) {
			t.Fatalf("read %d records, want %d:\n got %q\nwant %q", len(got), len(want), got, want)
		}
	}
	readAll(readers, put("a"))
	var hs []checkpoint.Handle
	for _, r := range readers {
		hs = append(hs, snapshot(t, r, 1, w)...)
		r.Close()
	}
	restored := open(3, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
	defer func() {
		for _, r := range restored {
			r.Close()
		}
	}()
	readAll(restored, put("b"))
}
