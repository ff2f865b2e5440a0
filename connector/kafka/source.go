package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// Start says where a source starts a partition no checkpoint holds an
// offset of.
type Start int

const (
	// Earliest starts at the partition's first offset. The default.
	Earliest Start = iota
	// Latest starts after the last record at the time the job starts.
	Latest
	// Committed starts at the offsets committed for SourceConfig.Group,
	// and at the earliest offset of a partition it has none for.
	Committed
	// AtTimestamp starts at the first record at or after
	// SourceConfig.StartTimestamp.
	AtTimestamp
)

// ParseStart parses earliest, latest, committed, or an RFC 3339 time.
func ParseStart(s string) (Start, time.Time, error) {
	switch s {
	case "", "earliest":
		return Earliest, time.Time{}, nil
	case "latest":
		return Latest, time.Time{}, nil
	case "committed":
		return Committed, time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("kafka start %q: want earliest, latest, committed or an RFC 3339 time such as 2026-11-30T12:00:00Z", s)
	}
	return AtTimestamp, t, nil
}

// SourceConfig configures Source. The zero value of a field means its
// default.
type SourceConfig[T any] struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topics are read by name; or TopicRegex, a regular expression that
	// topic names match whole (internal topics excluded). One is required.
	Topics     []string
	TopicRegex string
	// Start is where a partition without a checkpointed offset starts.
	// Default Earliest. Partitions found while the job runs start at their
	// earliest offset.
	Start          Start
	StartTimestamp time.Time
	// Group, if set, is the consumer group that offsets are committed to
	// when a checkpoint completes, so that lag tools see the job's
	// progress; Start Committed reads it. Recovery never depends on it.
	Group string
	// Bounded stops at the offsets that were the latest (the last stable
	// offsets, read_committed) when the job first started. They are part
	// of the checkpointed state: a restored job stops at the same place,
	// and a bounded job ends with its final checkpoint. Partitions created
	// later are not read.
	Bounded bool
	// ReadUncommitted also reads records of open and aborted transactions.
	// Default: read_committed.
	ReadUncommitted bool
	// Decode makes a T of a record. Required. An error fails the job,
	// naming topic, partition and offset, unless SkipInvalid, which skips
	// such records and counts them (the log says how many).
	Decode      func(*kgo.Record) (T, error)
	SkipInvalid bool
	// DiscoveryInterval is how often new partitions (and topics matching
	// TopicRegex) are looked for. Default 30s; negative: never.
	DiscoveryInterval time.Duration
	// BatchSize is the most records one Read emits. Default 1024.
	BatchSize int
	// Timeout bounds the requests made at start. Default DefaultTimeout.
	Timeout time.Duration
	// ClientOpts are extra franz-go options (TLS, SASL, ...).
	ClientOpts []kgo.Opt
}

// StringValue decodes a record's value as text.
func StringValue(r *kgo.Record) (string, error) { return string(r.Value), nil }

// Source returns a source of the records of cfg's topics. It fails now if
// the configuration is invalid, the brokers do not answer, or a topic named
// in cfg.Topics does not exist.
func Source[T any](cfg SourceConfig[T]) (func() weir.SourceReader[T], error) {
	var re *regexp.Regexp
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafka source: no brokers")
	case cfg.Decode == nil:
		return nil, errors.New("kafka source: Decode is required (for example kafka.StringValue)")
	case (len(cfg.Topics) == 0) == (cfg.TopicRegex == ""):
		return nil, errors.New("kafka source: give topics, or a topic regex, not both")
	case cfg.Start == Committed && cfg.Group == "":
		return nil, errors.New("kafka source: Start Committed needs a Group")
	case cfg.Bounded && cfg.Start == Latest:
		return nil, errors.New("kafka source: a bounded source that starts at the latest offsets reads nothing")
	case cfg.Start < Earliest || cfg.Start > AtTimestamp:
		return nil, fmt.Errorf("kafka source: Start %d is none of Earliest, Latest, Committed and AtTimestamp", cfg.Start)
	case cfg.Start == AtTimestamp && cfg.StartTimestamp.IsZero():
		return nil, errors.New("kafka source: Start AtTimestamp needs a StartTimestamp")
	case cfg.Start != AtTimestamp && !cfg.StartTimestamp.IsZero():
		return nil, errors.New("kafka source: a StartTimestamp is read only with Start AtTimestamp: set Start to AtTimestamp, or drop StartTimestamp")
	}
	if cfg.TopicRegex != "" {
		var err error
		if re, err = regexp.Compile("^(?:" + cfg.TopicRegex + ")$"); err != nil {
			return nil, fmt.Errorf("kafka source: topic regex %q: %w", cfg.TopicRegex, err)
		}
	}
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = 30 * time.Second
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	cl, err := client(cfg.Brokers, cfg.ClientOpts)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := checkTopics(ctx, kadm.NewClient(cl), cfg.Brokers, cfg.Topics, false, 0); err != nil {
		return nil, err
	}
	return func() weir.SourceReader[T] { return &reader[T]{cfg: cfg, re: re} }, nil
}

// split is one partition a subtask reads: Next is the offset of the next
// record to read; End, in bounded mode, the offset to stop at (-1:
// unbounded).
type split struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Next      int64  `json:"n"`
	End       int64  `json:"e"`
	// From is the offset the job started the partition at, for a rewind
	// (weir verify); absent in checkpoints of Weir before it.
	From *int64 `json:"f,omitempty"`
	// id names it for event time: each partition has its own watermark.
	id string
}

func (s split) done() bool { return s.End >= 0 && s.Next >= s.End }

type tp struct {
	topic     string
	partition int32
}

// maxCommits bounds the offsets kept for commits to the consumer group.
const maxCommits = 64

type reader[T any] struct {
	operator.Base
	cfg SourceConfig[T]
	re  *regexp.Regexp
	ctx *operator.Context
	cl  *kgo.Client
	adm *kadm.Client

	splits map[tp]*split
	// undeclared holds the splits added since the last Read, which
	// declares them for event time (weir.EnterSplit).
	undeclared []*split
	// known holds the partitions this subtask took, at its start or found
	// since, and, restored, the union of every subtask's: each has a split
	// somewhere. The others are found by discovery.
	known        map[tp]bool
	nextDiscover time.Time
	// nextDeleted is when a bounded read that fetches nothing looks next
	// for records retention deleted before it read them (passDeleted), and
	// listing the look in flight, if any.
	nextDeleted time.Time
	listing     *startsListing
	skipped     int64
	// commits holds the offsets each recent snapshot recorded, to commit
	// to the consumer group when its checkpoint completes.
	commits map[checkpoint.ID]map[tp]int64
}

func (r *reader[T]) Open(ctx *operator.Context) error {
	r.ctx = ctx
	r.splits, r.known, r.commits = map[tp]*split{}, map[tp]bool{}, map[checkpoint.ID]map[tp]int64{}
	iso := kgo.ReadCommitted()
	if r.cfg.ReadUncommitted {
		iso = kgo.ReadUncommitted()
	}
	// Control records (transaction markers) are kept: they take offsets,
	// and a bounded source must see its position pass them. Fetches wait
	// at most 500ms for data, as Kafka's own consumer does (franz-go waits
	// 5s), so that partitions found later are read soon.
	opts := append([]kgo.Opt{kgo.FetchMaxWait(500 * time.Millisecond)}, r.cfg.ClientOpts...)
	cl, err := client(r.cfg.Brokers, opts, kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	r.cl, r.adm = cl, kadm.NewClient(cl)
	rctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	switch {
	case ctx.Rewind:
		if err := r.rewind(rctx, ctx.Restore); err != nil {
			return err
		}
	case ctx.Restore != nil:
		if err := r.restore(ctx.Restore); err != nil {
			return err
		}
		r.skipDeleted(rctx)
		// Partitions the checkpoint did not hold (of a topic the
		// configuration names now, or made while the job was down) are
		// read from their start, as discovery reads them and as Flink
		// does (FLIP-288), bounded or not, discovery or not.
		if err := r.assign(rctx, Earliest, func(k tp) bool { return !r.known[k] }); err != nil {
			return err
		}
	default:
		if err := r.assign(rctx, r.cfg.Start, nil); err != nil {
			return err
		}
	}
	offsets := map[string]map[int32]kgo.Offset{}
	for k, s := range r.splits {
		if s.done() {
			continue
		}
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.Offset{}
		}
		offsets[k.topic][k.partition] = kgo.NewOffset().At(s.Next)
	}
	r.cl.AddConsumePartitions(offsets)
	r.nextDiscover = ctx.Now().Add(r.cfg.DiscoveryInterval)
	return nil
}

// restore takes this subtask's share of the checkpointed splits, and
// knows the partitions of them all.
func (r *reader[T]) restore(rs *operator.Restore) error {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", r.ctx.Subtask, r.ctx.Parallelism)
	if err != nil {
		return err
	}
	var dropped []string
	for _, it := range items {
		var s split
		if err := json.Unmarshal(it, &s); err != nil {
			return operator.Permanent(fmt.Errorf("kafka source: restore split: %w", err))
		}
		if !r.configured(s.Topic) {
			// The configuration no longer names the topic: as in Flink, its
			// partitions are not read on.
			dropped = append(dropped, fmt.Sprintf("%s/%d", s.Topic, s.Partition))
			continue
		}
		r.add(&s)
	}
	if len(dropped) > 0 {
		r.ctx.Logger.Info("kafka source: not reading on partitions of topics the configuration no longer names", "partitions", strings.Join(dropped, " "))
	}
	// Known are the partitions with a split in the checkpoint, every
	// subtask's: not its "known" list, which before session 33 could name
	// a partition no subtask had taken, never to be read (note 123). That
	// list is still written, for earlier versions.
	all, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", 0, 1)
	if err != nil {
		return err
	}
	for _, it := range all {
		var s split
		if err := json.Unmarshal(it, &s); err != nil {
			return operator.Permanent(fmt.Errorf("kafka source: restore split: %w", err))
		}
		if r.configured(s.Topic) {
			r.known[tp{s.Topic, s.Partition}] = true
		}
	}
	return nil
}

// configured says whether the configuration names topic.
func (r *reader[T]) configured(topic string) bool {
	if r.re != nil {
		return r.re.MatchString(topic)
	}
	return slices.Contains(r.cfg.Topics, topic)
}

// skipDeleted moves each restored partition whose log now starts after
// the offset the checkpoint recorded to the log's start, with a warning:
// retention deleted records the job had not read.
func (r *reader[T]) skipDeleted(ctx context.Context) {
	var parts []tp
	for k, s := range r.splits {
		if !s.done() {
			parts = append(parts, k)
		}
	}
	if len(parts) == 0 {
		return
	}
	// What cannot be listed (a deleted topic, a request that failed) is
	// read as before this check: the restore does not depend on it.
	listed, err := r.adm.ListStartOffsets(ctx, topicsOf(parts)...)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = r.adm.ListEndOffsets(ctx, topicsOf(parts)...)
	}
	if err != nil {
		r.ctx.Logger.Warn("kafka source: could not check whether retention deleted records the restored checkpoint had not read", "err", err)
		return
	}
	for _, k := range parts {
		o, ok := listed.Lookup(k.topic, k.partition)
		s, first := r.splits[k], o.Offset
		if e, eok := ends.Lookup(k.topic, k.partition); ok && o.Err == nil && eok && e.Err == nil && (e.Offset < s.Next || s.End >= 0 && e.Offset < s.End) {
			// Offsets the checkpoint read (or a bounded read was to read:
			// a log only grows) are not in the log: it is another log (the
			// topic deleted and made again, or its log truncated). Its
			// records below the checkpoint's offset are not the ones
			// read: read it from its start, and a bounded read up to its
			// end now.
			r.ctx.Logger.Warn("kafka source: the partition's log ends before the offset the restored checkpoint had read: the topic was deleted and made again, or its log truncated; reading the log from its start",
				"topic", k.topic, "partition", k.partition, "checkpointed", s.Next, "log-start", o.Offset, "log-end", e.Offset)
			s.Next = o.Offset
			if s.End >= 0 {
				s.End = max(e.Offset, s.Next)
			}
			continue
		}
		if !ok || o.Err != nil || first <= s.Next {
			continue
		}
		if s.End >= 0 {
			first = min(first, s.End)
		}
		r.ctx.Logger.Warn("kafka source: the log no longer holds records the restored checkpoint had not read (retention deleted them); reading on from its start",
			"topic", k.topic, "partition", k.partition, "checkpointed", s.Next, "log-start", o.Offset, "skipped", first-s.Next)
		s.Next = first
	}
}

// Rewindable: a checkpoint records where the job started each partition
// and where it got to.
func (r *reader[T]) Rewindable() error { return nil }

// rewind takes this subtask's share of the records checkpoint rs had read
// (nil: none): each partition from the offset the job started it at up
// to its recorded position, bounded. The records must still be in the
// log.
func (r *reader[T]) rewind(ctx context.Context, rs *operator.Restore) error {
	r.cfg.Bounded = true
	if rs == nil {
		return nil
	}
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", 0, 1)
	if err != nil {
		return err
	}
	var mine []*split
	for _, it := range items {
		var s split
		if err := json.Unmarshal(it, &s); err != nil {
			return operator.Permanent(fmt.Errorf("kafka source: rewind to checkpoint %d: %w", rs.Checkpoint, err))
		}
		if s.From == nil {
			return operator.Permanent(fmt.Errorf("kafka source: checkpoint %d, taken by an earlier version of Weir, does not record where the job started reading %s/%d: it cannot be rewound", rs.Checkpoint, s.Topic, s.Partition))
		}
		if owner(s.Topic, s.Partition, r.ctx.Parallelism) == r.ctx.Subtask {
			mine = append(mine, &split{Topic: s.Topic, Partition: s.Partition, Next: *s.From, End: s.Next, From: s.From})
		}
	}
	if len(mine) == 0 {
		return nil
	}
	parts := make([]tp, len(mine))
	for i, s := range mine {
		parts[i] = tp{s.Topic, s.Partition}
	}
	starts, err := r.startOffsets(ctx, parts, Earliest)
	if err != nil {
		return err
	}
	for _, s := range mine {
		if first := starts[tp{s.Topic, s.Partition}]; first > s.Next && s.Next < s.End {
			return operator.Permanent(fmt.Errorf("kafka source: %s/%d no longer holds offsets %d to %d, which checkpoint %d read (the log starts at %d now: retention deleted them): it cannot be rewound",
				s.Topic, s.Partition, s.Next, first-1, rs.Checkpoint, first))
		}
		r.add(s)
	}
	return nil
}

// assign takes this subtask's partitions (those only allows; nil: all, on
// a fresh start) and their start (and, bounded, end) offsets.
func (r *reader[T]) assign(ctx context.Context, start Start, only func(tp) bool) error {
	parts, err := r.partitions(ctx)
	if err != nil {
		return err
	}
	var mine []tp
	for _, k := range parts {
		if only != nil && !only(k) {
			continue
		}
		// Known only where it is taken: a partition created while the job
		// starts may be listed here and not by its owner (see discover).
		if owner(k.topic, k.partition, r.ctx.Parallelism) == r.ctx.Subtask {
			r.known[k] = true
			mine = append(mine, k)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	starts, err := r.startOffsets(ctx, mine, start)
	if err != nil {
		return err
	}
	var ends map[tp]int64
	if r.cfg.Bounded {
		if ends, err = r.endOffsets(ctx, mine); err != nil {
			return err
		}
	}
	for _, k := range mine {
		s := &split{Topic: k.topic, Partition: k.partition, Next: starts[k], End: -1, From: ptr(starts[k])}
		if r.cfg.Bounded {
			s.End = ends[k]
		}
		r.add(s)
	}
	return nil
}

// add makes s one of the reader's splits.
func (r *reader[T]) add(s *split) {
	s.id = fmt.Sprintf("%s/%d", s.Topic, s.Partition)
	r.splits[tp{s.Topic, s.Partition}] = s
	r.undeclared = append(r.undeclared, s)
}

// partitions lists the partitions of the source's topics, sorted.
func (r *reader[T]) partitions(ctx context.Context) ([]tp, error) {
	details, err := r.adm.ListTopics(ctx, r.cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka source: list topics: %w", err)
	}
	var out []tp
	for name, d := range details {
		if d.Err != nil || d.IsInternal || (r.re != nil && !r.re.MatchString(name)) {
			continue
		}
		for p := range d.Partitions {
			out = append(out, tp{name, p})
		}
	}
	slices.SortFunc(out, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return out, nil
}

func (r *reader[T]) startOffsets(ctx context.Context, parts []tp, start Start) (map[tp]int64, error) {
	topics := topicsOf(parts)
	var listed kadm.ListedOffsets
	var err error
	switch start {
	case Earliest, Committed:
		listed, err = r.adm.ListStartOffsets(ctx, topics...)
	case Latest:
		listed, err = r.listEnd(ctx, topics)
	case AtTimestamp:
		listed, err = r.adm.ListOffsetsAfterMilli(ctx, r.cfg.StartTimestamp.UnixMilli(), topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka source: list offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	out, err := offsetsOf(listed, parts)
	if err != nil || start != Committed {
		return out, err
	}
	committed, err := r.adm.FetchOffsets(ctx, r.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("kafka source: committed offsets of group %s: %w", r.cfg.Group, err)
	}
	for _, k := range parts {
		if o, ok := committed.Lookup(k.topic, k.partition); ok && o.Err == nil && o.At >= 0 {
			out[k] = o.At
		}
	}
	return out, nil
}

func (r *reader[T]) endOffsets(ctx context.Context, parts []tp) (map[tp]int64, error) {
	listed, err := r.listEnd(ctx, topicsOf(parts))
	if err != nil {
		return nil, fmt.Errorf("kafka source: list end offsets: %w", err)
	}
	return offsetsOf(listed, parts)
}

// listEnd lists the offsets after the last record a consumer of the
// source's isolation level can read.
func (r *reader[T]) listEnd(ctx context.Context, topics []string) (kadm.ListedOffsets, error) {
	if r.cfg.ReadUncommitted {
		return r.adm.ListEndOffsets(ctx, topics...)
	}
	return r.adm.ListCommittedOffsets(ctx, topics...)
}

func topicsOf(parts []tp) []string {
	set := map[string]bool{}
	for _, k := range parts {
		set[k.topic] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func offsetsOf(listed kadm.ListedOffsets, parts []tp) (map[tp]int64, error) {
	out := map[tp]int64{}
	for _, k := range parts {
		o, ok := listed.Lookup(k.topic, k.partition)
		switch {
		case !ok:
			return nil, fmt.Errorf("kafka source: no offset listed for %s/%d", k.topic, k.partition)
		case o.Err != nil:
			return nil, fmt.Errorf("kafka source: offset of %s/%d: %w", k.topic, k.partition, o.Err)
		}
		out[k] = o.Offset
	}
	return out, nil
}

// pollIdle is how long Read waits before polling again when nothing was
// buffered.
const pollIdle = 5 * time.Millisecond

func (r *reader[T]) Read(out weir.Collector[T]) (operator.PollResult, error) {
	if r.cfg.DiscoveryInterval > 0 && !r.cfg.Bounded && !r.ctx.Now().Before(r.nextDiscover) {
		r.nextDiscover = r.ctx.Now().Add(r.cfg.DiscoveryInterval)
		if err := r.discover(); err != nil {
			r.ctx.Logger.Warn("kafka source: looking for new partitions failed; trying again later", "err", err)
		}
	}
	if r.cfg.Bounded && r.allDone() {
		return operator.PollResult{Exhausted: true}, nil
	}
	fetches := r.cl.PollRecords(nil, r.cfg.BatchSize)
	var failed error
	fetches.EachError(func(topic string, partition int32, err error) {
		if failed == nil {
			failed = fatal(fmt.Sprintf("kafka source: fetch %s/%d", topic, partition), err)
		}
	})
	if failed != nil {
		return operator.PollResult{}, failed
	}
	// A new partition holds the watermark back from the start, not only
	// once it has records.
	for _, s := range r.undeclared {
		weir.EnterSplit(out, s.id)
		if s.done() {
			weir.FinishSplit(out, s.id)
		}
	}
	r.undeclared = r.undeclared[:0]
	n := 0
	var finished []tp
	var err error
	var last *split
	fetches.EachRecord(func(rec *kgo.Record) {
		k := tp{rec.Topic, rec.Partition}
		s := r.splits[k]
		if err != nil || s == nil || s.done() {
			return // not ours, or past a bounded end
		}
		if rec.Offset < s.Next {
			// The client asks for s.Next, and drops what comes before it in
			// a batch; a record before it means the log is another now (the
			// topic deleted and made again, or its log truncated), and the
			// client started it over: its records are not those read.
			r.ctx.Logger.Warn("kafka source: the partition's log went back before the offset read: the topic was deleted and made again, or its log truncated; reading on from there",
				"topic", rec.Topic, "partition", rec.Partition, "read-up-to", s.Next, "offset", rec.Offset)
		}
		if s != last {
			weir.EnterSplit(out, s.id)
			last = s
		}
		s.Next = rec.Offset + 1
		if s.done() {
			finished = append(finished, k)
			weir.FinishSplit(out, s.id)
		}
		if rec.Attrs.IsControl() {
			return
		}
		if s.End >= 0 && rec.Offset >= s.End {
			return
		}
		v, derr := r.cfg.Decode(rec)
		if derr != nil {
			if !r.cfg.SkipInvalid {
				err = operator.Permanent(fmt.Errorf("kafka source: record at %s/%d offset %d cannot be decoded: %w (to skip such records, set SkipInvalid, skip-invalid=true in the URL)",
					rec.Topic, rec.Partition, rec.Offset, derr))
				return
			}
			if r.skipped++; r.skipped <= 10 || r.skipped%1000 == 0 {
				r.ctx.Logger.Warn("kafka source: skipped a record that cannot be decoded", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", derr, "skipped", r.skipped)
			}
			return
		}
		out.Collect(v)
		n++
	})
	if err != nil {
		return operator.PollResult{}, err
	}
	if len(finished) > 0 {
		r.cl.RemoveConsumePartitions(partitionsOf(finished))
	}
	if r.cfg.Bounded && r.allDone() {
		return operator.PollResult{Exhausted: true}, nil
	}
	if n == 0 && fetches.NumRecords() == 0 {
		if r.cfg.Bounded && r.passDeleted(out) && r.allDone() {
			return operator.PollResult{Exhausted: true}, nil
		}
		return operator.PollResult{IdleUntil: r.ctx.Now().Add(pollIdle)}, nil
	}
	return operator.PollResult{}, nil
}

// deletedCheckInterval is how often a bounded read that fetches nothing
// looks for records deleted before it read them.
const deletedCheckInterval = time.Second

// startsListing is a listing of the log start offsets of parts, run
// beside Read (passDeleted): a slow broker must not hold the task, which
// takes no barrier or cancel while Read runs.
type startsListing struct {
	parts  []tp
	cancel context.CancelFunc
	done   chan struct{}
	listed kadm.ListedOffsets
	err    error
}

// passDeleted moves each unfinished split of a bounded read whose log now
// starts past the offset it reads next to the log's start, or to its end,
// with a warning, and reports whether it ended any. Retention (or
// DeleteRecords) deleted records the job had not read: the client resumes
// at the log's start without a record to say so, and a split whose every
// record up to its end is gone would wait for one forever (as a restore
// finds it, skipDeleted). It starts a listing at most once a second, and
// takes its answer at a later call.
func (r *reader[T]) passDeleted(out weir.Collector[T]) bool {
	l := r.listing
	if l == nil {
		if r.ctx.Now().Before(r.nextDeleted) {
			return false
		}
		r.nextDeleted = r.ctx.Now().Add(deletedCheckInterval)
		var parts []tp
		for k, s := range r.splits {
			if !s.done() {
				parts = append(parts, k)
			}
		}
		if len(parts) == 0 {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		l = &startsListing{parts: parts, cancel: cancel, done: make(chan struct{})}
		r.listing = l
		go func() {
			defer close(l.done)
			l.listed, l.err = r.adm.ListStartOffsets(ctx, topicsOf(parts)...)
		}()
	}
	select {
	case <-l.done:
	default:
		return false
	}
	r.listing = nil
	l.cancel()
	if l.err != nil {
		r.ctx.Logger.Warn("kafka source: could not check whether retention deleted records not read yet; trying again later", "err", l.err)
		return false
	}
	var finished []tp
	for _, k := range l.parts {
		o, ok := l.listed.Lookup(k.topic, k.partition)
		s := r.splits[k]
		if !ok || o.Err != nil || s == nil || s.done() || o.Offset <= s.Next {
			continue
		}
		next := min(o.Offset, s.End)
		r.ctx.Logger.Warn("kafka source: the log no longer holds records this bounded read had not read (retention deleted them); reading on from its start",
			"topic", k.topic, "partition", k.partition, "read-up-to", s.Next, "log-start", o.Offset, "end", s.End, "skipped", next-s.Next)
		s.Next = next
		if s.done() {
			weir.FinishSplit(out, s.id)
			finished = append(finished, k)
		}
	}
	if len(finished) > 0 {
		r.cl.RemoveConsumePartitions(partitionsOf(finished))
	}
	return len(finished) > 0
}

func partitionsOf(ks []tp) map[string][]int32 {
	out := map[string][]int32{}
	for _, k := range ks {
		out[k.topic] = append(out[k.topic], k.partition)
	}
	return out
}

func (r *reader[T]) allDone() bool {
	for _, s := range r.splits {
		if !s.done() {
			return false
		}
	}
	return true
}

// discover starts reading the partitions created since the job assigned
// partitions last, each from its earliest offset, when this subtask owns
// them.
func (r *reader[T]) discover() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	parts, err := r.partitions(ctx)
	if err != nil {
		return err
	}
	var mine []tp
	for _, k := range parts {
		// A partition another subtask owns stays unknown here until a
		// checkpoint has it from its owner: known is the union of the
		// subtasks' sets, and a restore would take it for read.
		if !r.known[k] && owner(k.topic, k.partition, r.ctx.Parallelism) == r.ctx.Subtask {
			mine = append(mine, k)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	starts, err := r.startOffsets(ctx, mine, Earliest)
	if err != nil {
		return err
	}
	offsets := map[string]map[int32]kgo.Offset{}
	for _, k := range mine {
		r.known[k] = true
		r.add(&split{Topic: k.topic, Partition: k.partition, Next: starts[k], End: -1, From: ptr(starts[k])})
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.Offset{}
		}
		offsets[k.topic][k.partition] = kgo.NewOffset().At(starts[k])
		r.ctx.Logger.Info("kafka source: reading a new partition", "topic", k.topic, "partition", k.partition, "from", starts[k])
	}
	r.cl.AddConsumePartitions(offsets)
	return nil
}

func (r *reader[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	keys := slices.SortedFunc(maps.Keys(r.splits), func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	items := make([][]byte, len(keys))
	offsets := make(map[tp]int64, len(keys))
	for i, k := range keys {
		items[i], _ = json.Marshal(r.splits[k])
		offsets[k] = r.splits[k].Next
	}
	known := make([][]byte, 0, len(r.known))
	for k := range r.known {
		b, _ := json.Marshal(split{Topic: k.topic, Partition: k.partition})
		known = append(known, b)
	}
	if r.cfg.Group != "" {
		r.commits[id] = offsets
		// Checkpoints that failed are never notified: keep the newest.
		for old := range r.commits {
			if old+maxCommits <= id {
				delete(r.commits, old)
			}
		}
	}
	splits := r.ctx.SnapshotList(state.Split, "splits", items)
	knownAsync := r.ctx.SnapshotList(state.Union, "known", known)
	return func(w operator.Writer) ([]checkpoint.Handle, error) {
		hs, err := splits(w)
		if err != nil {
			return nil, err
		}
		more, err := knownAsync(w)
		return append(hs, more...), err
	}, nil
}

// NotifyComplete commits the offsets of checkpoint id to the consumer
// group, for lag tools; a failure is logged, never fatal.
func (r *reader[T]) NotifyComplete(id checkpoint.ID) error {
	offsets, ok := r.commits[id]
	for old := range r.commits {
		if old <= id {
			delete(r.commits, old)
		}
	}
	if !ok || len(offsets) == 0 {
		return nil
	}
	var commit kadm.Offsets
	for k, o := range offsets {
		commit.Add(kadm.Offset{Topic: k.topic, Partition: k.partition, At: o, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	resp, err := r.adm.CommitOffsets(ctx, r.cfg.Group, commit)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		r.ctx.Logger.Warn("kafka source: could not commit offsets to the consumer group (lag tools will lag; recovery does not use them)", "group", r.cfg.Group, "checkpoint", id, "err", err)
	}
	return nil
}

func (r *reader[T]) Close() error {
	if l := r.listing; l != nil {
		l.cancel()
		<-l.done
		r.listing = nil
	}
	if r.cl != nil {
		closeConsumer(r.cl, partitionsOf(slices.Collect(maps.Keys(r.splits))))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
