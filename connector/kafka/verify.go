package kafka

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// Records calls f with the record v becomes, as verify compares it: its
// topic, key, value and headers (not its partition, which the partitioner
// may pick at random for records without keys).
func (w *writer[T]) Records(v T, f func(rec []byte)) {
	r := w.cfg.Encode(v)
	topic := r.Topic
	if topic == "" {
		topic = w.cfg.Topic
	}
	f(appendRecord(nil, topic, r.Key, r.Value, r.Headers))
}

// appendRecord appends the form verify compares records in: the topic, then
// the key, the value and each header's key=value, quoted (Go syntax), null
// for a null key or value.
func appendRecord(b []byte, topic string, key, value []byte, headers []kgo.RecordHeader) []byte {
	quote := func(b, v []byte) []byte {
		if v == nil {
			return append(b, "null"...)
		}
		return strconv.AppendQuote(b, string(v))
	}
	b = append(b, topic...)
	b = quote(append(b, ' '), key)
	b = quote(append(b, ' '), value)
	for _, h := range headers {
		b = strconv.AppendQuote(append(b, ' '), h.Key)
		b = quote(append(b, '='), h.Value)
	}
	return b
}

// Verifiable refuses a sink writing at least once or without guarantees.
func (w *writer[T]) Verifiable() error {
	if w.cfg.Delivery != ExactlyOnce {
		return fmt.Errorf("the kafka sink into %s writes %v: its output may hold records twice, which a rerun does not reproduce; verify reads back exactly-once output only", w.cfg.Topic, w.cfg.Delivery)
	}
	return nil
}

// RecordKey is a record's topic and key, which verify pairs a changed
// record by.
func (w *writer[T]) RecordKey(rec []byte) string {
	topic, rest, _ := strings.Cut(string(rec), " ")
	if strings.HasPrefix(rest, "null") {
		return topic + " null"
	}
	key, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return string(rec)
	}
	return topic + " " + key
}

// Committed reads back what the topic holds since the lineage began, except
// what the attempt that took checkpoint ctx.Restore.Checkpoint wrote after
// it: read_uncommitted with the transactions' markers, the sink's records
// within the checkpoint's spans count if committed or still open (recorded:
// a restore commits them), the attempt's records after the checkpoint (its
// producer ids at its epochs, outside the spans) do not, and every other
// committed record does — what runs after an older checkpoint committed
// before a restore of it (the comparison reports them duplicated), what
// other producers wrote (unexpected). It only reads.
func (w *writer[T]) Committed(ctx *operator.Context, f func(rec []byte)) error {
	upTo := ctx.Restore.Checkpoint
	rec, err := recorded(ctx)
	switch {
	case err != nil:
		return err
	case !rec.complete:
		return fmt.Errorf("checkpoint %d of kafka sink %s does not record where all its output is: its history goes through a checkpoint of Weir before it recorded that, or of another delivery; verify a checkpoint of a run started over with this version", upTo, ctx.UID)
	}
	spans, since := rec.spans, rec.since
	ranges := map[partition]offsets{} // from the first record any of the sink's producers wrote to the last recorded one
	topics := map[string]bool{w.cfg.Topic: true}
	for k, o := range spans {
		widen(ranges, k.partition, o)
		topics[k.Topic] = true
	}
	cl, err := client(w.cfg.Brokers, w.cfg.ClientOpts)
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	reads, err := w.checkReadable(rctx, adm, topics, ranges, rec.starts)
	if err != nil {
		return err
	}
	if err := w.alone(rctx, adm, ctx, topics); err != nil {
		return err
	}
	// First the markers (a transaction's marker follows its last record),
	// then the records: every partition of the topics from where the
	// lineage began to the end, for what runs after an older checkpoint
	// committed (before a restore of it) may lie anywhere.
	markers := map[spanKey][]marker{}
	err = w.read(reads, func(r *kgo.Record) {
		if !r.Attrs.IsControl() {
			return
		}
		var key kmsg.ControlRecordKey
		if key.ReadFrom(r.Key) != nil {
			return
		}
		k := spanKey{r.ProducerID, partition{r.Topic, r.Partition}}
		markers[k] = append(markers[k], marker{r.Offset, key.Type == kmsg.ControlRecordKeyTypeCommit})
	})
	if err != nil {
		return err
	}
	var buf []byte
	return w.read(reads, func(r *kgo.Record) {
		if r.Attrs.IsControl() {
			return
		}
		p := partition{r.Topic, r.Partition}
		k := spanKey{r.ProducerID, p}
		committed, open := outcome(markers[k], r.Offset)
		o, inSpan := spans[k]
		e, attempt := since[r.ProducerID]
		switch {
		case inSpan && r.Offset >= o.First && r.Offset <= o.Last:
			if !committed && !open {
				return // aborted
			}
		case attempt && r.ProducerEpoch >= e:
			return // what the attempt that took the checkpoint wrote after it
		case r.Attrs.IsTransactional() && !committed:
			return // aborted, or open and recorded by no checkpoint
		}
		buf = appendRecord(buf[:0], r.Topic, r.Key, r.Value, r.Headers)
		f(buf)
	})
}

// marker is a transaction's commit or abort marker in a partition.
type marker struct {
	Offset int64
	Commit bool
}

// outcome says how the transaction of a record at offset ended, by its
// producer's markers in the partition: committed, or still open (no marker
// after it).
func outcome(ms []marker, offset int64) (committed, open bool) {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Offset > offset })
	if i == len(ms) {
		return false, true
	}
	return ms[i].Commit, false
}

// recordedOutput is what a checkpoint records of where the sink's output
// is: every subtask's spans, the first epoch of each producer id in the
// attempt that took it, and whether the spans cover the whole output.
type recordedOutput struct {
	spans    map[spanKey]offsets
	since    map[int64]int16
	starts   map[int32]int64 // of the sink's topic
	complete bool
}

// recorded reads it from every subtask's state.
func recorded(ctx *operator.Context) (recordedOutput, error) {
	r := recordedOutput{spans: map[spanKey]offsets{}, since: map[int64]int16{}, starts: map[int32]int64{}, complete: true}
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "txns", 0, 1)
	if err != nil {
		return r, err
	}
	pools := 0
	for _, it := range items {
		var rec item
		if err := json.Unmarshal(it, &rec); err != nil {
			return r, fmt.Errorf("kafka sink %s: checkpoint %d: %w", ctx.UID, ctx.Restore.Checkpoint, err)
		}
		switch {
		case rec.Pool != nil:
			pools++
			r.complete = r.complete && rec.Pool.Spans
			for _, s := range rec.Pool.Since {
				keepMin(r.since, s.PID, s.Epoch)
			}
			for _, s := range rec.Pool.Starts {
				keepMin(r.starts, s.Partition, s.Offset)
			}
		case rec.Span != nil:
			widen(r.spans, rec.Span.key(), rec.Span.bounds())
		}
	}
	if pools == 0 {
		return r, fmt.Errorf("checkpoint %d holds no state of kafka sink %s: it was not writing exactly once then", ctx.Restore.Checkpoint, ctx.UID)
	}
	return r, nil
}

// alone refuses topics another sink of the job writes too (by its
// ownership records): its records would count as another producer's.
func (w *writer[T]) alone(rctx context.Context, adm *kadm.Client, ctx *operator.Context, topics map[string]bool) error {
	ends, err := adm.ListEndOffsets(rctx, OwnersTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka sink: the end of the ownership topic %s: %w", OwnersTopic, err)
	}
	reads := map[partition]interval{}
	ends.Each(func(o kadm.ListedOffset) { reads[partition{o.Topic, o.Partition}] = interval{0, o.Offset} })
	var other []string
	err = w.read(reads, func(r *kgo.Record) {
		var key []string
		if r.Attrs.IsControl() || json.Unmarshal(r.Key, &key) != nil || len(key) != 4 || key[0] != ownerKeyVersion {
			return
		}
		if topics[key[1]] && key[2] == ctx.Job && key[3] != ctx.UID && !slices.Contains(other, key[3]) {
			other = append(other, key[3])
		}
	})
	if err != nil {
		return err
	}
	if len(other) > 0 {
		slices.Sort(other)
		return fmt.Errorf("sinks %s and %s of job %s write into the same topic: verify cannot tell their records apart, and would report the others' as unexpected; give each sink a topic of its own to verify it", ctx.UID, strings.Join(other, ", "), ctx.Job)
	}
	return nil
}

// interval is the offsets [From, To) of a partition.
type interval struct{ From, To int64 }

// checkReadable refuses what reading the topics back cannot count right: a
// compacted topic (it keeps the last record of each key), records of the
// ranges the log no longer holds (retention), a log that ends before them
// (the topic was made again). It returns what to read of each partition of
// the topics, to the end: of the sink's topic, from where the lineage began
// (starts; the log's start for a partition made since); of a topic Encode
// chose, from the lineage's first record in each partition it wrote.
func (w *writer[T]) checkReadable(ctx context.Context, adm *kadm.Client, topics map[string]bool, ranges map[partition]offsets, starts map[int32]int64) (map[partition]interval, error) {
	names := slices.Sorted(maps.Keys(topics))
	configs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: describe %s: %w", strings.Join(names, ", "), err)
	}
	for _, c := range configs {
		if c.Err != nil {
			return nil, fmt.Errorf("kafka sink: describe topic %s: %w", c.Name, c.Err)
		}
		for _, kv := range c.Configs {
			if kv.Key == "cleanup.policy" && kv.Value != nil && strings.Contains(*kv.Value, "compact") {
				return nil, fmt.Errorf("topic %s is compacted (cleanup.policy=%s): it keeps only the last record of each key, so its committed output cannot be counted against a rerun's", c.Name, *kv.Value)
			}
		}
	}
	logStarts, err := adm.ListStartOffsets(ctx, names...)
	if err == nil {
		err = logStarts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka sink: the start offsets of %s: %w", strings.Join(names, ", "), err)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka sink: the end offsets of %s: %w", strings.Join(names, ", "), err)
	}
	for p, o := range ranges {
		if s, ok := logStarts.Lookup(p.Topic, p.Partition); ok && s.Offset > o.First {
			return nil, fmt.Errorf("%s/%d: the log starts at offset %d, after the job's first output at %d: retention deleted records the job committed, so its output cannot be read whole", p.Topic, p.Partition, s.Offset, o.First)
		}
		if e, ok := ends.Lookup(p.Topic, p.Partition); !ok || e.Offset <= o.Last {
			return nil, fmt.Errorf("%s/%d ends before offset %d, where the checkpoint records output: the topic was deleted and made again, or is another cluster's", p.Topic, p.Partition, o.Last)
		}
	}
	reads := map[partition]interval{}
	ends.Each(func(e kadm.ListedOffset) {
		p := partition{e.Topic, e.Partition}
		from := int64(0)
		if s, ok := logStarts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		switch r, ok := ranges[p]; {
		case e.Topic == w.cfg.Topic:
			if s, ok := starts[e.Partition]; ok {
				from = max(from, s)
			}
		case ok:
			// A topic Encode chose: the lineage's start there is not
			// recorded, its first record is.
			from = r.First
		default:
			return
		}
		if from < e.Offset {
			reads[p] = interval{from, e.Offset}
		}
	})
	return reads, nil
}

// errStalled is a read that got no record for the sink's Timeout.
var errStalled = errors.New("no record came for the timeout")

// read calls f with every record (control records too) of each partition
// in its interval, read_uncommitted.
func (w *writer[T]) read(reads map[partition]interval, f func(*kgo.Record)) error {
	from := map[string]map[int32]kgo.Offset{}
	next := map[partition]int64{}
	to := map[partition]int64{}
	for p, in := range reads {
		if in.To <= in.From {
			continue
		}
		if from[p.Topic] == nil {
			from[p.Topic] = map[int32]kgo.Offset{}
		}
		from[p.Topic][p.Partition] = kgo.NewOffset().At(in.From)
		next[p], to[p] = in.From, in.To
	}
	if len(next) == 0 {
		return nil
	}
	cl, err := client(w.cfg.Brokers, w.cfg.ClientOpts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords(), kgo.ConsumePartitions(from))
	if err != nil {
		return err
	}
	defer closeConsumer(cl, partitionsAt(from))
	for len(next) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		fs := cl.PollFetches(ctx)
		stalled := ctx.Err() != nil
		cancel()
		if stalled {
			p := slices.MinFunc(slices.Collect(maps.Keys(next)), func(a, b partition) int {
				return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
			})
			return fmt.Errorf("kafka sink: read %s/%d back at offset %d, up to %d: %w (%v)", p.Topic, p.Partition, next[p], to[p], errStalled, w.cfg.Timeout)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("kafka sink: read %s/%d back: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			p := partition{r.Topic, r.Partition}
			n, ok := next[p]
			if !ok || r.Offset < n {
				return
			}
			if r.Offset < to[p] {
				f(r)
			}
			if r.Offset+1 >= to[p] {
				delete(next, p)
				return
			}
			next[p] = r.Offset + 1
		})
	}
	return nil
}
