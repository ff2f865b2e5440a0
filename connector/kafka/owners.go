package kafka

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// OwnersTopic is the compacted topic in which Kafka sinks keep their
// ownership records: one per (topic, job, sink UID) that has committed
// output, so that a later run of the job that does not restore finds it and
// refuses to add to it (issue 19, defect 4). The sink creates it (one
// partition, cleanup.policy=compact) when it is missing.
//
// NB: Kafka's own internal topics begin with "__" (__consumer_offsets,
// __transaction_state), a prefix applications leave alone, and "weir" in
// it names the owner; a user's topic of this name would be read as
// ownership records, and its other records ignored. Its key says what it
// is (ownerKeyVersion), so a record of another kind never matches.
const OwnersTopic = "__weir_sink_owners"

// ownerKeyVersion begins every ownership record's key.
const ownerKeyVersion = "weir-sink-owner/1"

// ErrEarlierOutput marks the refusal of a run that does not restore, and
// does not start over, to write into a topic that holds output an earlier
// run of the same job's sink committed.
var ErrEarlierOutput = errors.New("the topic holds output an earlier run of this job committed")

// ownerKey is the key of the ownership record of the sink uid of job into
// topic: a JSON array, which escapes every string, so that no two triples
// share a key whatever characters job names and UIDs hold.
func ownerKey(topic, job, uid string) []byte {
	return mustJSON([]string{ownerKeyVersion, topic, job, uid})
}

// prefixKeyVersion begins the key of a transactional id prefix's record.
const prefixKeyVersion = "weir-sink-prefix/1"

// prefixKey is the key of the record of the sink that uses transactional
// id prefix: an exactly-once sink's start aborts every open transaction
// under its prefix, so two sinks with one prefix lose each other's
// pre-committed output.
func prefixKey(prefix string) []byte {
	return mustJSON([]string{prefixKeyVersion, prefix})
}

// ownership is the value of an ownership record: which run wrote it, for
// the people who read the topic.
type ownership struct {
	Topic string `json:"topic"`
	// TopicID is the topic's ID (KIP-516): a topic deleted and made again
	// has another, and holds none of the output the record speaks of.
	TopicID     string `json:"topic_id,omitempty"`
	Job         string `json:"job"`
	UID         string `json:"uid"`
	Subtask     int    `json:"subtask"`
	Parallelism int    `json:"parallelism"`
	// Restored is the checkpoint the run restored; 0: it started from
	// nothing.
	Restored checkpoint.ID `json:"restored,omitempty"`
	// Fresh: the run started over (--fresh) after earlier output.
	Fresh bool `json:"fresh,omitempty"`
	// Run and Attempt are operator.Context.RunID and Attempt: a record of
	// the running attempt is not an earlier run's, whatever order the
	// subtasks open in. Empty in records written before run ids: those are
	// an earlier run's.
	Run     string `json:"run,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// TakesOver, in a prefix's record: the sink restores a checkpoint
	// written under the prefix, and takes it from whoever held it.
	TakesOver bool `json:"takes_over,omitempty"`
	// FirstClaim, in a prefix's record: it holds the prefix only if the
	// prefix is free (or it takes over). Records of earlier versions,
	// without it, each took the prefix (the last one held it).
	FirstClaim bool `json:"first_claim,omitempty"`
}

// ownerRecord is the ownership record the writer's first output of a run
// goes with: into the same transaction when exactly once, so that it is
// committed if and only if some of the run's output is.
func (w *writer[T]) ownerRecord() *kgo.Record {
	o := ownership{Topic: w.cfg.Topic, TopicID: w.topicID, Job: w.ctx.Job, UID: w.ctx.UID, Subtask: w.ctx.Subtask, Parallelism: w.ctx.Parallelism, Fresh: w.ctx.StartOver,
		Run: w.ctx.RunID, Attempt: w.ctx.Attempt}
	if w.ctx.Restore != nil {
		o.Restored = w.ctx.Restore.Checkpoint
	}
	return &kgo.Record{Topic: OwnersTopic, Key: ownerKey(w.cfg.Topic, w.ctx.Job, w.ctx.UID), Value: mustJSON(o)}
}

// createOwnersTopic creates OwnersTopic if it is missing.
func createOwnersTopic(ctx context.Context, adm *kadm.Client) error {
	details, err := adm.ListTopics(ctx, OwnersTopic)
	if err != nil {
		return fmt.Errorf("kafka sink: look up the ownership topic %s: %w", OwnersTopic, err)
	}
	if d, ok := details[OwnersTopic]; ok && d.Err == nil {
		return nil
	}
	compact := "compact"
	resp, err := adm.CreateTopics(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, OwnersTopic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fatal(fmt.Sprintf("kafka sink: create the ownership topic %s (compacted; the sink records there which job wrote into which topic, so that a run that does not restore is not added to an earlier run's output; create it, or let the job's principal create it)", OwnersTopic), err)
	}
	return nil
}

// found is a committed ownership record.
type found struct {
	partition int32
	offset    int64
	value     []byte
}

// findOwner reads OwnersTopic from its start to its end, read_uncommitted
// with the transaction markers, and returns, of the committed ownership
// records of this sink's topic, job and UID that speak of the topic as it
// is (its topic ID), the last one an earlier run wrote and the last one an
// earlier attempt of this run wrote, or nil. Records of this attempt, which
// its other subtasks write from their first output on (at least once, and
// without checkpoints, before subtask 0 may have opened), are skipped.
//
// NB: every committed record, not only the last: a record of this attempt
// may follow an earlier run's. The topic is compacted, but its cleaner
// keeps the last record of a key and never touches the segment records
// are being appended to, so an earlier run's record is gone only after
// later ones of the key filled a segment.
//
// NB: not read_committed, which a transaction another job's sink has open
// in the topic (its first interval) would hold back. A record whose
// transaction is still open is not committed, and a run that does not
// restore never commits an earlier run's transaction: it aborts them.
//
// It also returns the record that holds the writer's transactional id
// prefix (prefixKey; written outside transactions; nextOwner), or the last
// tombstone of the prefix if none holds it since, or nil.
func (w *writer[T]) findOwner(ctx context.Context) (run, attempt, prefix *found, err error) {
	adm := kadm.NewClient(w.plain)
	ends, err := adm.ListEndOffsets(ctx, OwnersTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafka sink %s: read the end of the ownership topic %s: %w", w.ctx.UID, OwnersTopic, err)
	}
	span := map[int32][2]int64{}
	ends.Each(func(o kadm.ListedOffset) { span[o.Partition] = [2]int64{0, o.Offset} })
	key := string(ownerKey(w.cfg.Topic, w.ctx.Job, w.ctx.UID))
	ofPrefix := ""
	if w.prefix != "" {
		ofPrefix = string(prefixKey(w.prefix))
	}
	committed := func(f found) {
		switch w.earlier(f.value) {
		case earlierRun:
			run = &f
		case earlierAttempt:
			attempt = &f
		}
	}
	open := map[int64][]found{} // producer id: its matching records not yet ended
	err = w.readOwners(ctx, span, func(r *kgo.Record) {
		at := found{r.Partition, r.Offset, r.Value}
		switch {
		case r.Attrs.IsControl():
			// Key: version, then type (0 abort, 1 commit), int16 each.
			if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:]) == 1 {
				for _, f := range open[r.ProducerID] {
					committed(f)
				}
			}
			delete(open, r.ProducerID)
		case ofPrefix != "" && string(r.Key) == ofPrefix && !r.Attrs.IsTransactional():
			prefix = nextOwner(prefix, &at)
		case string(r.Key) != key:
		case r.Attrs.IsTransactional():
			open[r.ProducerID] = append(open[r.ProducerID], at)
		default: // at least once, or without guarantees
			committed(at)
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return run, attempt, prefix, nil
}

// readOwners reads OwnersTopic read_uncommitted with the transaction
// markers, each partition of span from the first offset up to (not
// including) the second, and calls each with its records in order.
func (w *writer[T]) readOwners(ctx context.Context, span map[int32][2]int64, each func(*kgo.Record)) error {
	from := map[int32]kgo.Offset{}
	todo := map[int32]int64{} // partition: the offset it is read up to
	for p, s := range span {
		if s[0] >= s[1] {
			continue
		}
		from[p] = kgo.NewOffset().At(s[0])
		if s[0] == 0 {
			from[p] = kgo.NewOffset().AtStart() // where the log starts now
		}
		todo[p] = s[1]
	}
	if len(todo) == 0 {
		return nil
	}
	at := map[string]map[int32]kgo.Offset{OwnersTopic: from}
	cl, err := client(w.cfg.Brokers, w.cfg.ClientOpts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords(), kgo.ConsumePartitions(at))
	if err != nil {
		return err
	}
	defer closeConsumer(cl, partitionsAt(at))
	for len(todo) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("kafka sink %s: read the ownership topic %s: %w", w.ctx.UID, OwnersTopic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return fatal(fmt.Sprintf("kafka sink %s: read the ownership topic %s", w.ctx.UID, OwnersTopic), ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := todo[r.Partition]
			if !ok {
				return
			}
			if r.Offset+1 >= end {
				delete(todo, r.Partition) // NB: also past a record compaction removed
			}
			if r.Offset < end {
				each(r)
			}
		})
	}
	return nil
}

// Kinds of committed ownership records, for this sink.
const (
	ownAttempt     = iota // this attempt's, or of a topic since made again
	earlierRun            // an earlier run's, or one without a run
	earlierAttempt        // an earlier attempt's of this run
)

// plantedNoRunID, set only by the planted-bug test of the lifecycle
// generator, puts back the defect run ids fixed: every committed record of
// the key is an earlier run's.
var plantedNoRunID atomic.Bool

// earlier says whose a committed ownership record of this sink's key is.
func (w *writer[T]) earlier(value []byte) int {
	var o ownership
	if json.Unmarshal(value, &o) != nil {
		return earlierRun // not ours to read: the safe side
	}
	switch {
	case o.TopicID != "" && w.topicID != "" && o.TopicID != w.topicID:
		return ownAttempt // the topic was made again: that output is gone
	case o.Run == "" || w.ctx.RunID == "" || o.Run != w.ctx.RunID || plantedNoRunID.Load():
		return earlierRun
	case o.Attempt != w.ctx.Attempt:
		return earlierAttempt
	}
	return ownAttempt
}

// checkOwner refuses a run that neither restores nor starts over if an
// earlier run of this job's sink committed output into the topic, as its
// ownership records say. Every subtask looks, before it aborts or writes
// anything. Records of this run are not
// an earlier run's: an attempt that restores nothing and does not start
// over (at least once, the sink keeps no state, so a restart after a
// checkpoint has no Restore) goes on; one that starts over says that the
// earlier attempts' output stays.
//
// An exactly-once sink (w.prefix set) also refuses a transactional id
// prefix that another sink's record claims (checkPrefix), restoring or not.
func (w *writer[T]) checkOwner(ctx context.Context) error {
	// NB: not subtask 0 alone: a sibling may open, write and finish
	// before it opens, and a refused run must write nothing. The records
	// of this run are not an earlier run's, so all decide alike.
	restores := w.ctx.Restore != nil || w.ctx.Resumed != 0
	if restores && w.prefix == "" {
		return nil
	}
	run, attempt, prefix, err := w.findOwner(ctx)
	if err != nil {
		return err
	}
	if w.prefix != "" {
		if err := w.checkPrefix(ctx, prefix, w.restoresPrefix()); err != nil {
			return err
		}
	}
	if restores {
		return nil
	}
	f := run
	if f == nil && w.ctx.StartOver {
		f = attempt
	}
	if f == nil {
		return nil
	}
	// NB: a topic emptied by hand after an earlier run is not empty any more
	// once another subtask of this attempt wrote: then the run is refused,
	// as it would be without run ids.
	if empty, err := w.emptied(ctx); err != nil || empty {
		return err
	}
	if w.ctx.StartOver {
		if w.ctx.Subtask != 0 {
			return nil
		}
		ends, err := kadm.NewClient(w.plain).ListCommittedOffsets(ctx, w.cfg.Topic)
		var at []string
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) { at = append(at, fmt.Sprintf("%d:%d", o.Partition, o.Offset)) })
		}
		w.ctx.Logger.Warn("kafka sink: starting over: the output of earlier runs (or of this run's earlier attempts) stays in the topic (Kafka cannot delete one writer's records), and this attempt's follows it",
			"topic", w.cfg.Topic, "job", w.ctx.Job, "sink", w.ctx.UID, "from partition:offset", strings.Join(at, ","))
		return nil
	}
	return operator.Permanent(fmt.Errorf("kafka sink %q of job %q: topic %s: %w (its ownership record is in %s, partition %d at offset %d): resume that run with --restore latest (Config.Restore \"latest\") if it completed a checkpoint, or start over with --fresh (Config.Fresh), which keeps the earlier output in the topic (Kafka cannot delete one writer's records; delete the topic's records, or make it again, to drop them) and writes this run's after it",
		w.ctx.UID, w.ctx.Job, w.cfg.Topic, ErrEarlierOutput, OwnersTopic, f.partition, f.offset))
}

// checkPrefix refuses the sink's transactional id prefix if another sink
// (of another job, or another UID) records it as its own (f: the prefix's
// last record, nil if none), unless the sink restores a checkpoint written
// under the prefix (continues): at its start a sink aborts every open
// transaction under its prefix, so two sinks with one prefix abort each
// other's pre-committed transactions, whose records are lost. A restore of
// a checkpoint of the prefix continues its lineage (a job renamed, a
// sink's UID changed), and takes the prefix over; any other restore (of a
// checkpoint under another prefix, or without the sink's state) does not. A sink whose prefix records no other writes its
// own record, outside transactions (it must be seen at once), before it
// aborts anything; a record without a value (a tombstone, which frees the
// prefix) or one it cannot read records none.
//
// Two sinks that start at the same moment may both find the prefix free
// and both record it: the first record after the one each found wins
// (firstClaim), and every later start reads the records so (nextOwner).
// The other sink is refused, and writes the winner's record again, so that
// the topic's last record of the prefix, all that compaction may leave in
// the end, names the winner too. NB: a loser that dies before that leaves
// its own record last; until compaction removes the winner's, every start
// still takes the first claim for the holder.
func (w *writer[T]) checkPrefix(ctx context.Context, f *found, continues bool) error {
	if o, ok := claimOf(f); ok && o.Job == w.ctx.Job && o.UID == w.ctx.UID {
		return nil // ours already
	} else if ok && !continues {
		return w.prefixTaken(o, f, "belongs to")
	}
	if hook := beforePrefixRecord.Load(); hook != nil {
		(*hook)()
	}
	rec := &kgo.Record{Topic: OwnersTopic, Key: prefixKey(w.prefix), Value: mustJSON(ownership{Topic: w.cfg.Topic, TopicID: w.topicID, Job: w.ctx.Job, UID: w.ctx.UID,
		Subtask: w.ctx.Subtask, Parallelism: w.ctx.Parallelism, Run: w.ctx.RunID, Attempt: w.ctx.Attempt, TakesOver: continues, FirstClaim: true})}
	if err := w.plain.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fatal(fmt.Sprintf("kafka sink %s: record transactional id prefix %q in %s", w.ctx.UID, w.prefix, OwnersTopic), err)
	}
	if continues {
		return nil // a restore of the prefix's lineage takes it over
	}
	from := int64(0)
	if f != nil {
		from = f.offset + 1
	}
	first, err := w.firstClaim(ctx, rec.Partition, from, rec.Offset)
	if err != nil {
		return err
	}
	o, ok := claimOf(first)
	if !ok || o.Job == w.ctx.Job && o.UID == w.ctx.UID {
		return nil // this sink's record, or a sibling subtask's, is the first
	}
	again := &kgo.Record{Topic: OwnersTopic, Key: prefixKey(w.prefix), Value: first.value}
	if err := w.plain.ProduceSync(ctx, again).FirstErr(); err != nil {
		return fatal(fmt.Sprintf("kafka sink %s: transactional id prefix %q was recorded at the same moment by sink %q of job %q; write its record again in %s", w.ctx.UID, w.prefix, o.UID, o.Job, OwnersTopic), err)
	}
	return w.prefixTaken(o, first, "was recorded at the same moment by")
}

// beforePrefixRecord, set only by tests, runs just before a sink records
// its transactional id prefix: another sink's start put there begins at
// the same moment as this one.
var beforePrefixRecord atomic.Pointer[func()]

// claimOf reads a prefix record: ok if it names a sink (not a tombstone,
// nor a value it cannot read).
func claimOf(f *found) (o ownership, ok bool) {
	ok = f != nil && len(f.value) > 0 && json.Unmarshal(f.value, &o) == nil && (o.Job != "" || o.UID != "")
	return o, ok
}

// prefixTaken refuses the sink's transactional id prefix, which the record
// f of sink o holds.
func (w *writer[T]) prefixTaken(o ownership, f *found, how string) error {
	return operator.Permanent(fmt.Errorf("kafka sink %q of job %q: transactional id prefix %q %s sink %q of job %q (writing %s; its record is in %s, partition %d at offset %d): two sinks with one prefix abort each other's transactions at their starts, and the output of completed checkpoints with them; give this sink a prefix of its own (TransactionalIDPrefix; by default each sink has one), or, if that sink will never run again, delete its record (a record of key %s and no value, a tombstone, in %s)",
		w.ctx.UID, w.ctx.Job, w.prefix, how, o.UID, o.Job, o.Topic, OwnersTopic, f.partition, f.offset, prefixKey(w.prefix), OwnersTopic))
}

// firstClaim returns the record that holds the prefix (nextOwner) after
// partition's records from offset from up to this sink's own record at
// mine, with the prefix free before them.
func (w *writer[T]) firstClaim(ctx context.Context, partition int32, from, mine int64) (*found, error) {
	key := string(prefixKey(w.prefix))
	var holder *found
	err := w.readOwners(ctx, map[int32][2]int64{partition: {from, mine}}, func(r *kgo.Record) {
		if string(r.Key) == key && !r.Attrs.IsTransactional() && !r.Attrs.IsControl() {
			holder = nextOwner(holder, &found{r.Partition, r.Offset, r.Value})
		}
	})
	return holder, err
}

// nextOwner is what holds a prefix after its record r, given cur before it
// (nil, or a record that names no sink: the prefix is free). A tombstone
// (or a value it cannot read) frees the prefix; a take-over takes it, as
// does a record of an earlier version (each of those took it); any other
// record takes it only if it is free: the first claim wins, so that of two
// sinks that found it free at the same moment, the later one's record does
// not.
func nextOwner(cur, r *found) *found {
	o, ok := claimOf(r)
	if _, held := claimOf(cur); !ok || o.TakesOver || !o.FirstClaim || !held {
		return r
	}
	return cur
}

// restoresPrefix reports whether the checkpoint the sink restores was
// written under its transactional id prefix: its pools say so, or (in
// checkpoints before pools did) a transaction it records is one of the
// prefix's.
func (w *writer[T]) restoresPrefix() bool {
	if w.ctx.Restore == nil {
		return false
	}
	items, err := state.RestoreList(w.ctx.Restore.Handles, w.ctx.Restore.Read, state.Union, "txns", w.ctx.Subtask, w.ctx.Parallelism)
	if err != nil {
		return false // Open reads them again, and fails
	}
	for _, it := range items {
		var rec item
		if json.Unmarshal(it, &rec) != nil {
			continue
		}
		if rec.Pool != nil && rec.Pool.Prefix == w.prefix {
			return true
		}
		if rec.Txn != nil {
			if _, ok := parseTxnID(w.prefix, rec.Txn.ID); ok {
				return true
			}
		}
	}
	return false
}

// lookUpTopicID returns the ID of the sink's topic (KIP-516), "" if the brokers
// have none.
func (w *writer[T]) lookUpTopicID(ctx context.Context) (string, error) {
	details, err := kadm.NewClient(w.plain).ListTopics(ctx, w.cfg.Topic)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return "", fmt.Errorf("kafka sink %s: look up topic %s: %w", w.ctx.UID, w.cfg.Topic, err)
	}
	if id := details[w.cfg.Topic].ID; id != (kadm.TopicID{}) {
		return id.String(), nil
	}
	return "", nil
}

// emptied reports whether the topic no longer holds the output of earlier
// runs because every partition's records were deleted (its start is its
// end). A topic made again since a record was written has another topic
// ID: findOwner skips that record.
func (w *writer[T]) emptied(ctx context.Context) (bool, error) {
	adm := kadm.NewClient(w.plain)
	starts, err := adm.ListStartOffsets(ctx, w.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return false, fmt.Errorf("kafka sink %s: read the start of topic %s: %w", w.ctx.UID, w.cfg.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, w.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return false, fmt.Errorf("kafka sink %s: read the end of topic %s: %w", w.ctx.UID, w.cfg.Topic, err)
	}
	empty := true
	ends.Each(func(e kadm.ListedOffset) {
		if s, ok := starts.Lookup(e.Topic, e.Partition); !ok || s.Offset < e.Offset {
			empty = false
		}
	})
	return empty, nil
}
