package wordcount

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLines reads topic read_committed, from the start to its last stable
// offsets, as output lines "word<TAB>count". It fails when ctx ends first:
// a transaction left open would hold a read_committed consumer back.
func KafkaLines(ctx context.Context, brokers []string, topic string) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		cl.Close() // it fetches nothing yet
		return nil, err
	}
	// The partitions are consumed from the start once their ends are
	// known, and closed as the connector's consumers close (closeConsumer
	// in connector/kafka): fetching stopped first, which waits for the
	// fetches in flight, as franz-go's Close races with a fetch its
	// metadata loop starts.
	from, parts := map[int32]kgo.Offset{}, map[string][]int32{}
	ends.Each(func(o kadm.ListedOffset) {
		from[o.Partition] = kgo.NewOffset().AtStart()
		parts[topic] = append(parts[topic], o.Partition)
	})
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	defer func() {
		cl.RemoveConsumePartitions(parts)
		cl.Close()
	}()
	pos := map[int32]int64{}
	caughtUp := func() bool {
		all := true
		ends.Each(func(o kadm.ListedOffset) { all = all && pos[o.Partition] >= o.Offset })
		return all
	}
	var lines []string
	for !caughtUp() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s read_committed: %w (at %v of %v: an open transaction holds consumers back?)", topic, err, pos, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				lines = append(lines, string(r.Key)+"\t"+string(r.Value))
			}
		})
	}
	return lines, nil
}

// PostgresRows reads table's rows as output lines "word<TAB>count".
func PostgresRows(ctx context.Context, url, table string) (iter.Seq[string], error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT word, count FROM "+pgx.Identifier(strings.Split(table, ".")).Sanitize())
	if err != nil {
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var w string
		var c int64
		err := r.Scan(&w, &c)
		return fmt.Sprint(w, "\t", c), err
	})
	if err != nil {
		return nil, err
	}
	return func(yield func(string) bool) {
		for _, l := range lines {
			if !yield(l) {
				return
			}
		}
	}, nil
}
