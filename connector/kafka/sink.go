package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// Delivery is what a sink guarantees.
type Delivery int

const (
	// ExactlyOnce writes in transactions committed when a checkpoint
	// completes (two-phase commit). The default. Consumers must read
	// read_committed.
	ExactlyOnce Delivery = iota
	// AtLeastOnce flushes at every snapshot: after a restore, records may
	// be written twice, never lost.
	AtLeastOnce
	// NoGuarantee writes and forgets: a failure may lose records.
	NoGuarantee
)

func (d Delivery) String() string {
	switch d {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	case NoGuarantee:
		return "none"
	}
	return fmt.Sprintf("delivery(%d)", int(d))
}

// ParseDelivery parses exactly-once, at-least-once or none.
func ParseDelivery(s string) (Delivery, error) {
	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce, NoGuarantee} {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("kafka delivery %q: want exactly-once, at-least-once or none", s)
}

// Defaults of SinkConfig.
const (
	// DefaultTransactionTimeout is Kafka brokers' default cap
	// (transaction.max.timeout.ms).
	DefaultTransactionTimeout = 15 * time.Minute
	// DefaultTransactionalIDs is the size of a subtask's pool of
	// transactional ids.
	DefaultTransactionalIDs = 8
)

// SinkConfig configures Sink. The zero value of a field means its default.
type SinkConfig[T any] struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic records go to, unless Encode sets Record.Topic. Required.
	Topic string
	// Encode makes a record of a T (key, value, headers). Required.
	Encode func(T) *kgo.Record
	// Delivery: ExactlyOnce (default), AtLeastOnce or NoGuarantee.
	Delivery Delivery
	// TransactionalIDPrefix names the sink's transactions: subtask s uses
	// the ids <prefix>-<s>-<k> for k below TransactionalIDs. Default
	// weir-<job>-<operator UID>. Two jobs must not share a prefix.
	TransactionalIDPrefix string
	// TransactionalIDs bounds the transactions a subtask has open at once:
	// one being written plus those pre-committed, waiting for their
	// checkpoint to complete. Default DefaultTransactionalIDs.
	TransactionalIDs int
	// TransactionTimeout is how long the broker keeps a transaction open
	// before aborting it. It must exceed the longest a pre-committed
	// transaction can wait for its commit (operator.CommitWait), which the
	// job checks when it starts, and must not exceed the broker's
	// transaction.max.timeout.ms. Default DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// CreateTopic creates a missing Topic with Partitions partitions
	// (default: the broker's default).
	CreateTopic bool
	Partitions  int32
	// Timeout bounds the requests made at start. Default DefaultTimeout.
	Timeout time.Duration
	// ClientOpts are extra franz-go options (TLS, SASL, ...).
	ClientOpts []kgo.Opt
}

// Sink returns a sink writing to cfg.Topic. It fails now if the
// configuration is invalid, the brokers do not answer, or the topic does
// not exist (unless CreateTopic).
func Sink[T any](cfg SinkConfig[T]) (func() weir.SinkWriter[T], error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafka sink: no brokers")
	case cfg.Topic == "":
		return nil, errors.New("kafka sink: no topic")
	case cfg.Encode == nil:
		return nil, errors.New("kafka sink: Encode is required")
	case cfg.Delivery < ExactlyOnce || cfg.Delivery > NoGuarantee:
		return nil, fmt.Errorf("kafka sink: %v", cfg.Delivery)
	case cfg.TransactionTimeout < 0 || cfg.TransactionalIDs < 0:
		return nil, errors.New("kafka sink: negative transaction timeout or transactional ids")
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.TransactionalIDs == 0 {
		cfg.TransactionalIDs = DefaultTransactionalIDs
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = -1
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
	if err := checkTopics(ctx, kadm.NewClient(cl), cfg.Brokers, []string{cfg.Topic}, cfg.CreateTopic, cfg.Partitions); err != nil {
		return nil, err
	}
	return func() weir.SinkWriter[T] { return &writer[T]{cfg: cfg} }, nil
}

// txn is one transactional id of a subtask's pool, with its client.
type txn struct {
	ID    string        `json:"id"`
	PID   int64         `json:"pid"`
	Epoch int16         `json:"epoch"`
	At    checkpoint.ID `json:"at"` // the checkpoint it was pre-committed at
	Sub   int           `json:"sub"`
	cl    *kgo.Client
	// recorded is the newest checkpoint whose state lists the transaction:
	// until a newer one completes, a restore may commit it again by its
	// producer id and epoch, so the id must not start a new transaction.
	recorded checkpoint.ID
	// flushed: the asynchronous part of a snapshot flushed it.
	mu      sync.Mutex
	flushed bool
}

// pool is what a subtask's state records besides its transactions, so a
// restore at another parallelism or pool size finds every id.
type pool struct {
	Sub         int `json:"sub"`
	Parallelism int `json:"parallelism"`
	Size        int `json:"size"`
}

type writer[T any] struct {
	cfg      SinkConfig[T]
	ctx      *operator.Context
	delivery Delivery
	prefix   string
	plain    *kgo.Client // producer without transactions; raw requests

	free    []*txn   // ids without a transaction
	open    *txn     // the transaction records go into
	pending []*txn   // pre-committed, by checkpoint
	cooling []*txn   // committed, but listed by a checkpoint a restore may use
	unmade  []string // ids of this subtask's pool without a client yet
	// reserved are the ids the restored checkpoint recorded: they are not
	// reused before a checkpoint of this run completes, so that a second
	// restore of the same checkpoint finds their epochs unchanged.
	reserved map[string]bool

	errMu    sync.Mutex
	firstErr error
}

func (w *writer[T]) Open(ctx *operator.Context) error {
	w.ctx, w.delivery = ctx, w.cfg.Delivery
	if !ctx.CheckpointingEnabled && w.delivery == ExactlyOnce {
		w.delivery = AtLeastOnce // without checkpoints there is nothing to commit at
		ctx.Logger.Info("kafka sink: no checkpoints, so records are written at least once and flushed when the input ends")
	}
	var err error
	if w.plain, err = client(w.cfg.Brokers, w.cfg.ClientOpts, kgo.DefaultProduceTopic(w.cfg.Topic), transactionVersion1()); err != nil {
		return err
	}
	if w.delivery != ExactlyOnce {
		return nil
	}
	w.prefix = w.cfg.TransactionalIDPrefix
	if w.prefix == "" {
		w.prefix = "weir-" + ctx.Job + "-" + ctx.UID
	}
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	if err := w.checkTimeout(rctx); err != nil {
		return err
	}
	oldP, oldSize := ctx.Parallelism, w.cfg.TransactionalIDs
	recorded := map[string]bool{}
	if ctx.Restore != nil {
		items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "txns", ctx.Subtask, ctx.Parallelism)
		if err != nil {
			return err
		}
		var commit []*txn
		for _, it := range items {
			var rec struct {
				Pool *pool `json:"pool"`
				Txn  *txn  `json:"txn"`
			}
			if err := json.Unmarshal(it, &rec); err != nil {
				return operator.Permanent(fmt.Errorf("kafka sink: restore: %w", err))
			}
			switch {
			case rec.Pool != nil:
				oldP, oldSize = max(oldP, rec.Pool.Parallelism), max(oldSize, rec.Pool.Size)
			case rec.Txn != nil:
				recorded[rec.Txn.ID] = true
				if rec.Txn.Sub%ctx.Parallelism == ctx.Subtask {
					commit = append(commit, rec.Txn)
				}
			}
		}
		// First commit what the checkpoint recorded: a producer that
		// initialised one of these ids first would abort it.
		slices.SortFunc(commit, func(a, b *txn) int { return int(a.At) - int(b.At) })
		for _, t := range commit {
			if err := w.commitRecorded(rctx, t); err != nil {
				return err
			}
		}
		w.reserved = recorded
	}
	// Then abort every other transaction this subtask's ids (and those of
	// subtasks a smaller parallelism no longer runs) left open, so that
	// read_committed consumers do not stall at them. The ids the checkpoint
	// recorded get their clients later (unmade).
	for s := ctx.Subtask; s < max(oldP, ctx.Parallelism); s += ctx.Parallelism {
		for k := range max(oldSize, w.cfg.TransactionalIDs) {
			id := w.txnID(s, k)
			mine := s == ctx.Subtask && k < w.cfg.TransactionalIDs
			if recorded[id] {
				if mine {
					w.unmade = append(w.unmade, id)
				}
				continue
			}
			t, err := w.newTxn(rctx, s, id)
			if err != nil {
				return err
			}
			if mine {
				w.free = append(w.free, t)
			} else {
				t.cl.Close()
			}
		}
	}
	return nil
}

func (w *writer[T]) txnID(sub, k int) string {
	return w.prefix + "-" + strconv.Itoa(sub) + "-" + strconv.Itoa(k)
}

// checkTimeout refuses a transaction timeout that could abort a
// pre-committed transaction before its commit, or that the broker caps.
func (w *writer[T]) checkTimeout(ctx context.Context) error {
	if bound := w.ctx.CommitWait; w.cfg.TransactionTimeout <= bound.Total() {
		return operator.Permanent(fmt.Errorf("kafka sink %s: transaction timeout %v is not above the longest a pre-committed transaction may wait for its commit, %s: the broker would abort it and its records would be lost; raise TransactionTimeout (txn-timeout in the URL), or lower those settings",
			w.ctx.UID, w.cfg.TransactionTimeout, bound))
	}
	configs, err := kadm.NewClient(w.plain).DescribeBrokerConfigs(ctx)
	if err != nil {
		return fmt.Errorf("kafka sink %s: read the brokers' configuration: %w", w.ctx.UID, err)
	}
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err == nil && w.cfg.TransactionTimeout > time.Duration(ms)*time.Millisecond {
				return operator.Permanent(fmt.Errorf("kafka sink %s: transaction timeout %v is above the broker's transaction.max.timeout.ms %v: lower TransactionTimeout, or raise the broker's setting",
					w.ctx.UID, w.cfg.TransactionTimeout, time.Duration(ms)*time.Millisecond))
			}
		}
	}
	return nil
}

// transactionVersion1 caps the sink's clients below KIP-890 part 2
// (transaction version 2). A restore commits a transaction a checkpoint
// recorded by its producer id and epoch, and must tell a transaction
// committed already (done) from one aborted (its records lost). Under
// version 2 every EndTxn bumps the epoch, and franz-go opts in only once it
// has seen a broker support it, re-initialising the producer id (another
// bump) after a commit at version 1; the broker then answers the restore's
// commit INVALID_TXN_STATE as if the transaction had been aborted, and the
// job could not restore. Version 1 keeps a committed transaction's epoch
// and answers a repeated commit as done.
func transactionVersion1() kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return kgo.MaxVersions(v)
}

// newTxn builds a transactional client for id and initialises its producer
// id, which aborts a transaction a previous producer left open under it.
func (w *writer[T]) newTxn(ctx context.Context, sub int, id string) (*txn, error) {
	cl, err := client(w.cfg.Brokers, w.cfg.ClientOpts, kgo.DefaultProduceTopic(w.cfg.Topic),
		kgo.TransactionalID(id), kgo.TransactionTimeout(w.cfg.TransactionTimeout), transactionVersion1())
	if err != nil {
		return nil, err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fatal("kafka sink: initialise transactional id "+id, err)
	}
	return &txn{ID: id, Sub: sub, cl: cl}, nil
}

// commitRecorded commits a transaction a checkpoint recorded, by its
// producer id and epoch: committing one already committed is done.
func (w *writer[T]) commitRecorded(ctx context.Context, t *txn) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = t.ID, t.PID, t.Epoch, true
	for attempt := 0; ; attempt++ {
		resp, err := req.RequestWith(ctx, w.plain)
		if err != nil {
			return fmt.Errorf("kafka sink: commit transaction %s of checkpoint %d: %w", t.ID, t.At, err)
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		switch {
		case err == nil:
			w.ctx.Logger.Info("kafka sink: committed a transaction the restored checkpoint recorded", "txn", t.ID, "checkpoint", t.At)
			return nil
		case kerr.IsRetriable(err) && attempt < 20:
			time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond) // the coordinator is busy ending it
			continue
		}
		return operator.Permanent(fmt.Errorf("kafka sink: transaction %s (producer %d, epoch %d) of checkpoint %d cannot be committed: %w; if the broker aborted it (the job was down longer than the transaction timeout %v?), its records are lost",
			t.ID, t.PID, t.Epoch, t.At, err, w.cfg.TransactionTimeout))
	}
}

// take returns an id to begin a transaction with.
func (w *writer[T]) take() (*txn, error) {
	if n := len(w.free); n > 0 {
		t := w.free[n-1]
		w.free = w.free[:n-1]
		return t, nil
	}
	for i, id := range w.unmade {
		if w.reserved[id] {
			continue
		}
		w.unmade = slices.Delete(w.unmade, i, i+1)
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		defer cancel()
		return w.newTxn(ctx, w.ctx.Subtask, id)
	}
	return nil, operator.Permanent(fmt.Errorf("kafka sink %s: all %d transactional ids of subtask %d hold transactions that a checkpoint lists and a restore may still need: raise TransactionalIDs, or find out why checkpoints do not complete",
		w.ctx.UID, w.cfg.TransactionalIDs, w.ctx.Subtask))
}

func (w *writer[T]) promise(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.firstErr == nil {
		w.firstErr = fatal("kafka sink: produce to "+w.cfg.Topic, err)
	}
}

func (w *writer[T]) produceErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.firstErr
}

func (w *writer[T]) Write(v T) error {
	rec := w.cfg.Encode(v)
	if rec.Topic == "" {
		rec.Topic = w.cfg.Topic
	}
	cl := w.plain
	if w.delivery == ExactlyOnce {
		if w.open == nil {
			t, err := w.take()
			if err != nil {
				return err
			}
			if err := t.cl.BeginTransaction(); err != nil {
				return fatal("kafka sink: begin transaction "+t.ID, err)
			}
			w.open = t
		}
		cl = w.open.cl
	}
	cl.Produce(context.Background(), rec, w.promise)
	return w.produceErr()
}

// Snapshot pre-commits: the open transaction is recorded with its producer
// id and epoch, and flushed in the asynchronous part, before the task
// acknowledges. At least once, it flushes here.
func (w *writer[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if err := w.produceErr(); err != nil {
		return nil, err
	}
	switch w.delivery {
	case NoGuarantee:
		return nil, nil
	case AtLeastOnce:
		if err := w.plain.Flush(context.Background()); err != nil {
			return nil, fatal("kafka sink: flush", err)
		}
		return nil, w.produceErr()
	}
	if t := w.open; t != nil {
		pid, epoch, err := t.cl.ProducerID(context.Background())
		if err != nil {
			return nil, fatal("kafka sink: producer id of "+t.ID, err)
		}
		t.PID, t.Epoch, t.At = pid, epoch, id
		w.pending = append(w.pending, t)
		w.open = nil
	}
	items := [][]byte{mustJSON(map[string]any{"pool": pool{Sub: w.ctx.Subtask, Parallelism: w.ctx.Parallelism, Size: w.cfg.TransactionalIDs}})}
	for _, t := range w.pending {
		items = append(items, mustJSON(map[string]any{"txn": t}))
		t.recorded = id
	}
	write := w.ctx.SnapshotList(state.Union, "txns", items)
	// NB: a pending transaction whose flush never ran (another operator's
	// asynchronous part failed first) is flushed by the next snapshot: a
	// checkpoint completes only once every transaction it records is.
	todo := slices.Clone(w.pending)
	return func(wr operator.Writer) ([]checkpoint.Handle, error) {
		for _, t := range todo {
			if err := t.flush(); err != nil {
				return nil, err
			}
		}
		if err := w.produceErr(); err != nil {
			return nil, err
		}
		return write(wr)
	}, nil
}

func (t *txn) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flushed {
		return nil
	}
	if err := t.cl.Flush(context.Background()); err != nil {
		return fatal("kafka sink: flush transaction "+t.ID, err)
	}
	t.flushed = true
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// NotifyComplete commits every transaction pre-committed up to checkpoint
// id: those of aborted checkpoints too, whose records later snapshots count
// as processed. An id is used again only once a checkpoint newer than every
// one that lists its transaction has completed: until then a restore may
// commit that transaction again, by its producer id and epoch, which a new
// transaction under the id would fence.
func (w *writer[T]) NotifyComplete(id checkpoint.ID) error {
	w.reserved = nil
	cooling := w.cooling[:0]
	for _, t := range w.cooling {
		if t.recorded < id {
			w.free = append(w.free, t)
		} else {
			cooling = append(cooling, t)
		}
	}
	w.cooling = cooling
	keep := w.pending[:0]
	for _, t := range w.pending {
		if t.At > id {
			keep = append(keep, t)
			continue
		}
		if err := t.cl.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
			return fatal(fmt.Sprintf("kafka sink: commit transaction %s of checkpoint %d", t.ID, t.At), err)
		}
		t.At, t.flushed = 0, false
		w.cooling = append(w.cooling, t)
	}
	w.pending = keep
	return nil
}

// Finish flushes, without checkpoints; with them, the final checkpoint
// commits.
func (w *writer[T]) Finish() error {
	if w.delivery == ExactlyOnce {
		return nil
	}
	if err := w.plain.Flush(context.Background()); err != nil {
		return fatal("kafka sink: flush", err)
	}
	return w.produceErr()
}

func (w *writer[T]) NotifyAborted(checkpoint.ID) {}

// Close closes the clients. Open transactions are left to the broker: the
// pre-committed ones are committed by the restore, the others aborted by it
// or by their timeout.
func (w *writer[T]) Close() error {
	for _, t := range slices.Concat(w.free, w.pending, w.cooling) {
		t.cl.Close()
	}
	if w.open != nil {
		w.open.cl.Close()
	}
	if w.plain != nil {
		w.plain.Close()
	}
	return nil
}
