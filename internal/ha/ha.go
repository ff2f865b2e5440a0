// Package ha makes a job's coordinator highly available on etcd (issue 20):
// coordinator processes of one job campaign for its leadership on an etcd
// lease, one leads at a time, and the job's checkpoint ids and the pointers
// to its completed checkpoints are kept in etcd, written only in
// transactions that compare the leader's key. A deposed leader (its lease
// ran out while it was paused or cut off) can write files, but it can never
// hand out a checkpoint id or make a checkpoint the job's restore point.
//
// Keys, under Config.Prefix and the job's name (path-escaped; "jobs/"
// keeps the keys of a prefix apart from those of a prefix below it):
//
//	<prefix>/jobs/<job>/leader/<lease>   a candidate; its value names it (its address); the oldest leads
//	<prefix>/jobs/<job>/checkpoint-id    the last checkpoint id handed out
//	<prefix>/jobs/<job>/completed/<id>   a completed checkpoint's Pointer (JSON), id in 20 digits
//	<prefix>/jobs/<job>/ended            the job ended under a term: "finished", or "failed: <why>"
//
// The epoch of a term is its leader key's create revision. etcd's revisions
// only grow, so each term of any candidate has a larger epoch than every
// term before it: whoever receives commands can refuse an older epoch's.
//
// A leader steps down on its own clock, before etcd could let another in:
// it renews its lease every sixth of the lease's time to live, and counts
// the lease as ending one time to live after it sent its last renewal that
// etcd answered (etcd counts from when it received it, which is later).
// Three quarters of the way there, with no renewal answered, Lost is
// closed: the rest is the slack for this process's own delays. The leader
// also watches its key: revoked or deleted (an operator forcing a
// failover), it steps down at once. Once Lost is closed, the leadership's
// writes are refused here, before they reach etcd.
package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/weirstream/weir/checkpoint"
)

// Defaults of Config.
const (
	DefaultPrefix      = "/weir"
	DefaultTTL         = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// ErrDeposed marks what a leader may no longer do: its term ended (its
// lease ran out or was revoked, or it was cut off from etcd for longer than
// the lease allows).
var ErrDeposed = errors.New("no longer the job's leader")

// ErrUnknownOutcome marks a write whose answer did not arrive (a timeout,
// a lost connection): etcd may have applied it or not. A coordinator must
// not take a Complete that failed so for a checkpoint that did not
// complete (Completed says which it was).
var ErrUnknownOutcome = errors.New("its outcome is unknown")

// Config says how to reach etcd and how long a leadership outlives its
// leader's silence.
type Config struct {
	// Endpoints are etcd's client addresses (host:port).
	Endpoints []string
	// Prefix is where the jobs' keys are. Default DefaultPrefix.
	Prefix string
	// TLS, if set, is used to reach etcd (its CA, a client certificate).
	TLS *tls.Config
	// TTL is the leader's lease: a standby takes over at most TTL after
	// the leader's last renewal. Whole seconds (etcd's leases count
	// seconds); etcd raises a TTL below its minimum (1.5 election
	// timeouts, 2 s by default). NB: the leader steps down after three
	// quarters of it without an answer, and etcd answers nothing while
	// it elects a raft leader (1 to 2 s with its default election
	// timeout, after a member is killed): below 5 s, losing etcd's raft
	// leader can depose the job's. Default DefaultTTL.
	TTL time.Duration
	// DialTimeout bounds connecting to etcd. Default DefaultDialTimeout.
	DialTimeout time.Duration
}

// ParseURL reads etcd://host:port[,host:port…][/prefix], the form of the
// --ha flag.
func ParseURL(s string) (Config, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return Config{}, fmt.Errorf("ha %q: want etcd://host:port[,host:port…][/prefix]", s)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	var cfg Config
	for h := range strings.SplitSeq(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n <= 0 || n > 65535 || host == "" || strings.ContainsFunc(host, func(r rune) bool {
			return r <= ' ' || r == '@' || r == '/' || r == '?' || r == '#' || r == '%'
		}) {
			return Config{}, fmt.Errorf("ha %q: %q is not host:port", s, h)
		}
		cfg.Endpoints = append(cfg.Endpoints, h)
	}
	if prefix != "" {
		cfg.Prefix = "/" + strings.TrimSuffix(prefix, "/")
	}
	return cfg, cfg.Validate()
}

// Validate says which setting is wrong.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("ha: no etcd endpoints")
	case c.TTL < 0 || c.TTL%time.Second != 0:
		return fmt.Errorf("ha: lease time to live %v: want whole seconds (etcd's leases count seconds)", c.TTL)
	case c.DialTimeout < 0:
		return fmt.Errorf("ha: dial timeout %v is negative", c.DialTimeout)
	case strings.ContainsAny(c.Prefix, "\x00") || c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/"):
		return fmt.Errorf("ha: prefix %q: want a path that starts with /", c.Prefix)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c
}

// Client is a connection to etcd. Safe for concurrent use.
type Client struct {
	cl  *clientv3.Client
	cfg Config
}

// Dial connects to etcd (lazily: a first request may wait up to
// Config.DialTimeout).
func Dial(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cl, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: cfg.DialTimeout,
		Logger: zap.NewNop(), DialKeepAliveTime: cfg.TTL / 3, DialKeepAliveTimeout: cfg.TTL / 3})
	if err != nil {
		return nil, fmt.Errorf("ha: etcd at %v: %w", cfg.Endpoints, err)
	}
	return &Client{cl: cl, cfg: cfg}, nil
}

// Close closes the connection. A leadership still held ends with its lease.
func (c *Client) Close() error { return c.cl.Close() }

func (c *Client) key(job, rest string) string {
	return c.cfg.Prefix + "/jobs/" + url.PathEscape(job) + "/" + rest
}

// Candidate is a coordinator that campaigns for a job's leadership.
type Candidate struct {
	// Name is what the candidate campaigned as (its address).
	Name string
	// Epoch is its term's epoch if it leads, or will be if it comes to.
	Epoch int64
}

// Candidates returns the job's candidates, the leader first (none: no
// coordinator campaigns).
func (c *Client) Candidates(ctx context.Context, job string) ([]Candidate, error) {
	resp, err := c.cl.Get(ctx, c.key(job, "leader/"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("ha: candidates of job %s: %w", job, err)
	}
	var cs []Candidate
	for _, kv := range resp.Kvs {
		cs = append(cs, Candidate{Name: string(kv.Value), Epoch: kv.CreateRevision})
	}
	return cs, nil
}

// Leadership is a term of a job's leadership. Its methods are safe for
// concurrent use.
type Leadership struct {
	// Epoch is the term's epoch: larger than every earlier term's.
	Epoch int64
	// Candidate is the name the leader campaigned as.
	Candidate string

	c       *Client
	job     string
	key     string
	lease   clientv3.LeaseID
	cluster uint64 // etcd's cluster id

	idMu sync.Mutex // one Reserve at a time
	// last is the last id this term reserved, and lastRev the counter's
	// revision it put (0: unknown, read it). idMu holds them.
	last    checkpoint.ID
	lastRev int64

	lost     chan struct{}
	loseOnce sync.Once
	err      error     // why it was lost; set before lost is closed
	lostTime time.Time // when; set before lost is closed
	stop     chan struct{}
	kept     chan struct{} // closed when the renewals stopped
	watched  chan struct{} // closed when the watch of the key stopped
	stopOnce sync.Once
}

// Campaign waits until candidate leads job, or ctx ends. While it waits,
// it is a standby: Candidates lists it. A campaign that fails or is
// cancelled revokes its lease (its key goes with it) in the background,
// so that it returns at once even when etcd cannot be reached.
func (c *Client) Campaign(ctx context.Context, job, candidate string) (*Leadership, error) {
	sent := time.Now()
	g, err := c.cl.Grant(ctx, int64(c.cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("ha: campaign for job %s: grant a lease: %w", job, err)
	}
	l := &Leadership{Candidate: candidate, c: c, job: job, lease: g.ID,
		lost: make(chan struct{}), stop: make(chan struct{}), kept: make(chan struct{}), watched: make(chan struct{})}
	// NB: the lease is renewed by the leadership's own loop, which knows
	// when a renewal was sent; the session's would keep the lease alive
	// after the loop gave it up.
	go l.renew(sent, time.Duration(g.TTL)*time.Second)
	s, err := concurrency.NewSession(c.cl, concurrency.WithLease(g.ID))
	if err != nil {
		close(l.watched)
		l.giveUp(nil)
		return nil, fmt.Errorf("ha: campaign for job %s: %w", job, err)
	}
	s.Orphan()
	e := concurrency.NewElection(s, c.key(job, "leader/"))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	// NB: a cancelled Campaign deletes its key under the client's context,
	// which has no deadline: cut off from etcd, it would not return.
	go func() { done <- e.Campaign(cctx, candidate) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-l.lost:
		err = l.err
	}
	if err == nil && ctx.Err() == nil && l.Err() == nil {
		l.key, l.Epoch, l.cluster = e.Key(), e.Rev(), e.Header().GetClusterId()
		go l.watch(e.Header().Revision + 1)
		return l, nil
	}
	close(l.watched)
	l.giveUp(done)
	return nil, fmt.Errorf("ha: campaign for job %s: %w", job, err)
}

// giveUp ends a campaign that did not lead: once the election returned
// (done, if it runs), it stops the renewals and revokes the lease, within
// a time to live, in the background.
func (l *Leadership) giveUp(done <-chan error) {
	go func() {
		if done != nil {
			<-done
		}
		l.end()
		ctx, cancel := context.WithTimeout(l.c.cl.Ctx(), l.c.cfg.TTL)
		defer cancel()
		l.c.cl.Revoke(ctx, l.lease) // NB: else it runs out, within a time to live
	}()
}

// watch watches the leader key from revision from (after its creation)
// until the leadership ends: deleted (its lease revoked, or by hand), the
// term is lost at once.
func (l *Leadership) watch(from int64) {
	defer close(l.watched)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
		case <-l.lost:
		}
		cancel()
	}()
	for ctx.Err() == nil {
		for resp := range l.c.cl.Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(from)) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose(fmt.Errorf("%w: its key was deleted (its lease revoked, or by hand)", ErrDeposed))
					return
				}
			}
			if resp.CompactRevision > 0 {
				from = resp.CompactRevision // NB: the key's history before is gone; a Get below settles it
			} else if resp.Header.Revision > 0 {
				from = resp.Header.Revision + 1
			}
			if resp.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (etcd lost its raft leader, or compacted): look
		// at the key itself, then watch again.
		gctx, gcancel := context.WithTimeout(ctx, l.c.cfg.TTL/6)
		resp, err := l.c.cl.Get(gctx, l.key)
		gcancel()
		if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.Epoch) {
			l.lose(fmt.Errorf("%w: its key is gone (its lease revoked, or deleted by hand)", ErrDeposed))
			return
		}
		if err == nil {
			from = resp.Header.Revision + 1
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.c.cfg.TTL / 6): // NB: etcd cannot be reached; the renewals decide
		}
	}
}

// renew renews the lease until the leadership ends or is lost. sent is
// when the request that granted (or last renewed) it was sent, ttl what
// etcd granted. It renews every sixth of the time to live, each try
// bounded by as long: when etcd elects a new raft leader (a second or two
// unavailable), a renewal gets through soon after it does.
func (l *Leadership) renew(sent time.Time, ttl time.Duration) {
	defer close(l.kept)
	for {
		// NB: etcd counts the lease from when it received the renewal,
		// which is after it was sent.
		deadline := sent.Add(ttl - ttl/4)
		every := ttl / 6
		wait := time.NewTimer(min(every, time.Until(deadline)))
		select {
		case <-l.stop:
			wait.Stop()
			return
		case <-wait.C:
		}
		if time.Now().After(deadline) {
			l.lose(fmt.Errorf("%w: etcd answered no renewal of its lease for %v (time to live %v)", ErrDeposed, time.Since(sent).Round(time.Millisecond), ttl))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(every, time.Until(deadline)))
		at := time.Now()
		resp, err := l.c.cl.KeepAliveOnce(ctx, l.lease)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0:
			l.lose(fmt.Errorf("%w: its lease ran out or was revoked", ErrDeposed))
			return
		case err == nil:
			sent, ttl = at, time.Duration(resp.TTL)*time.Second
		}
	}
}

func (l *Leadership) lose(why error) {
	l.loseOnce.Do(func() {
		l.err, l.lostTime = why, time.Now()
		close(l.lost)
	})
}

// end stops the renewals and the watch.
func (l *Leadership) end() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.kept
	<-l.watched
}

// Lost is closed when the term ended: the lease ran out or was revoked,
// the key was deleted, etcd answered no renewal for three quarters of its
// time to live, or Resign. Then Err says why, and the leader must stop acting: another may
// lead soon.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Err says why the term was lost, nil while it was not.
func (l *Leadership) Err() error {
	select {
	case <-l.lost:
		return l.err
	default:
		return nil
	}
}

// Resign ends the term at once (a standby takes over without waiting for
// the lease to run out) and stops the renewals.
func (l *Leadership) Resign(ctx context.Context) error {
	l.end()
	l.lose(fmt.Errorf("%w: it resigned", ErrDeposed))
	if _, err := l.c.cl.Revoke(ctx, l.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("ha: resign the leadership of job %s: %w", l.job, err)
	}
	return nil
}

// guard holds while this term lasts: the leader key is still the one it
// created.
func (l *Leadership) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.Epoch)
}

// refused returns why the term was lost, and who leads now if etcd says,
// or nil while the term lasts.
func (l *Leadership) refused(ctx context.Context) error {
	why := l.Err()
	if why == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.TTL/6) // NB: only for the message
	defer cancel()
	if cs, err := l.c.Candidates(ctx, l.job); err == nil && len(cs) > 0 && cs[0].Epoch != l.Epoch {
		return fmt.Errorf("%w; %s leads, epoch %d", why, cs[0].Name, cs[0].Epoch)
	}
	return why
}

// deposed says who leads instead, for an error.
func (l *Leadership) deposed(ctx context.Context) error {
	cs, err := l.c.Candidates(ctx, l.job)
	switch {
	case err != nil:
		return fmt.Errorf("%w (epoch %d): %v", ErrDeposed, l.Epoch, err)
	case len(cs) == 0 || cs[0].Epoch == l.Epoch:
		return fmt.Errorf("%w (epoch %d): its lease ended, and no one leads yet", ErrDeposed, l.Epoch)
	}
	return fmt.Errorf("%w (epoch %d): %s leads, epoch %d", ErrDeposed, l.Epoch, cs[0].Name, cs[0].Epoch)
}

// ErrIDUsed marks a checkpoint id that was handed out already.
var ErrIDUsed = errors.New("the checkpoint id was handed out already")

// Reserve records in etcd that checkpoint id is handed out: every id of
// the job, in any term, is larger than the last one reserved before it.
// Only the leader can. An id not above the last is refused with ErrIDUsed.
func (l *Leadership) Reserve(ctx context.Context, id checkpoint.ID) error {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	key := l.c.key(l.job, "checkpoint-id")
	unsure := false // a write of id whose answer did not arrive
	moved := 0
	for wait := unsureRetry; ; wait = min(2*wait, l.c.cfg.TTL/4) {
		if err := l.refused(ctx); err != nil {
			return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w", id, l.job, err)
		}
		last, rev := l.last, l.lastRev
		if rev == 0 {
			// A read in the term's guard: after an unknown outcome, the
			// counter at id is this term's write only if no other term
			// has begun (a paused leader's lease may have ended).
			txn, err := l.c.cl.Txn(ctx).If(l.guard()).Then(clientv3.OpGet(key)).Commit()
			switch {
			case err != nil && unsure && l.retryUnsure(ctx, wait):
				continue
			case err != nil && unsure:
				return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w (%w)", id, l.job, err, ErrUnknownOutcome)
			case err != nil:
				return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w", id, l.job, err)
			}
			if !txn.Succeeded {
				err := l.deposed(ctx)
				l.lose(err)
				return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w", id, l.job, err)
			}
			kvs := txn.Responses[0].GetResponseRange().Kvs
			if last = 0; len(kvs) == 1 {
				if last, err = parseID(key, kvs[0].Value); err != nil {
					return err
				}
				rev = kvs[0].ModRevision
			}
		}
		if unsure && last == id && rev != 0 {
			// The write whose answer did not arrive was applied: only
			// the leader writes the counter.
			l.last, l.lastRev = id, rev
			return nil
		}
		if last >= id && rev != 0 {
			return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w (the last is %d)", id, l.job, ErrIDUsed, last)
		}
		txn, err := l.c.cl.Txn(ctx).If(l.guard(), clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, strconv.FormatUint(uint64(id), 10))).Commit()
		if err != nil {
			l.lastRev, unsure = 0, true
			if !l.retryUnsure(ctx, wait) {
				return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %w (%w)", id, l.job, err, ErrUnknownOutcome)
			}
			continue
		}
		if txn.Succeeded {
			// The put made the counter's revision the transaction's: the
			// next Reserve needs no read.
			l.last, l.lastRev = id, txn.Header.Revision
			return nil
		}
		l.lastRev = 0
		if err := l.check(ctx); err != nil {
			return err
		}
		// The counter moved between the read and the write: this term's
		// own earlier call, whose answer did not arrive.
		if moved++; moved == 8 {
			return fmt.Errorf("ha: reserve checkpoint id %d of job %s: %s moved 8 times under its only writer: is another process writing it?", id, l.job, key)
		}
	}
}

// unsureRetry is the first wait before a write whose answer did not
// arrive is tried again.
const unsureRetry = 50 * time.Millisecond

// retryUnsure waits d before a write whose answer did not arrive is tried
// again, and says whether to: not once ctx is done or the term lost.
func (l *Leadership) retryUnsure(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return ctx.Err() == nil && l.Err() == nil
	case <-ctx.Done():
		return false
	case <-l.Lost():
		return false
	}
}

// check returns ErrDeposed if the term ended.
func (l *Leadership) check(ctx context.Context) error {
	resp, err := l.c.cl.Get(ctx, l.key)
	if err != nil {
		return fmt.Errorf("ha: job %s: %w", l.job, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.Epoch {
		err := l.deposed(ctx)
		l.lose(err) // NB: proven: the term ended, though its watch may not have told yet
		return err
	}
	return nil
}

// Verify asks etcd whether the term lasts: an error that wraps ErrDeposed
// proves it ended (and ends it here); another, that etcd did not answer.
func (l *Leadership) Verify(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.check(ctx)
}

// Pointer says that a checkpoint completed, and where it is.
type Pointer struct {
	ID checkpoint.ID `json:"id"`
	// Where is where its metadata is (the storage's chk-<id>).
	Where     string `json:"where"`
	Savepoint bool   `json:"savepoint,omitempty"`
	// Epoch is the epoch of the term that completed it (set by Complete).
	Epoch int64 `json:"epoch"`
}

// PointerKey is the etcd key that records checkpoint id as completed.
func (l *Leadership) PointerKey(id checkpoint.ID) string {
	return l.c.key(l.job, fmt.Sprintf("completed/%020d", id))
}

// Complete records that checkpoint p.ID completed: the job's restore point
// from now on. Only the leader can. A checkpoint whose Complete failed
// with ErrDeposed did not complete, whatever its files say, unless the
// error wraps ErrUnknownOutcome too: one whose Complete failed with
// ErrUnknownOutcome may have (Completed says).
func (l *Leadership) Complete(ctx context.Context, p Pointer) error {
	p.Epoch = l.Epoch
	v, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return l.fenced(ctx, fmt.Sprintf("complete checkpoint %d", p.ID), clientv3.OpPut(l.PointerKey(p.ID), string(v)))
}

// Forget deletes the pointers of checkpoints that are no longer kept.
// Only the leader can. NB: etcd takes at most 128 operations in one
// transaction (its --max-txn-ops): many ids take several.
func (l *Leadership) Forget(ctx context.Context, ids ...checkpoint.ID) error {
	for chunk := range slices.Chunk(ids, 100) {
		var ops []clientv3.Op
		for _, id := range chunk {
			ops = append(ops, clientv3.OpDelete(l.PointerKey(id)))
		}
		if err := l.fenced(ctx, fmt.Sprintf("forget checkpoints %d to %d", chunk[0], chunk[len(chunk)-1]), ops...); err != nil {
			return err
		}
	}
	return nil
}

// fenced applies ops if the term lasts. An answer that did not arrive (a
// connection lost) is retried while ctx lasts: ops put and delete fixed
// values, so applying them twice is applying them once.
func (l *Leadership) fenced(ctx context.Context, what string, ops ...clientv3.Op) error {
	unsure := false // an earlier try's answer did not arrive: it may have applied
	fail := func(err error) error {
		if unsure {
			return fmt.Errorf("ha: job %s: %s: %w (an earlier try's answer did not arrive: %w)", l.job, what, err, ErrUnknownOutcome)
		}
		return fmt.Errorf("ha: job %s: %s: %w", l.job, what, err)
	}
	for wait := unsureRetry; ; wait = min(2*wait, l.c.cfg.TTL/4) {
		if err := l.refused(ctx); err != nil {
			return fail(err)
		}
		txn, err := l.c.cl.Txn(ctx).If(l.guard()).Then(ops...).Commit()
		switch {
		case err != nil:
			unsure = true
			if !l.retryUnsure(ctx, wait) {
				return fail(err)
			}
		case !txn.Succeeded:
			// NB: the guard failed: the term ended, though its watch may
			// not have told yet.
			err := l.deposed(ctx)
			l.lose(err)
			return fail(err)
		default:
			return nil
		}
	}
}

// Completed returns the job's completed checkpoints, oldest first.
func (c *Client) Completed(ctx context.Context, job string) ([]Pointer, error) {
	resp, err := c.cl.Get(ctx, c.key(job, "completed/"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("ha: completed checkpoints of job %s: %w", job, err)
	}
	ps := make([]Pointer, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p Pointer
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("ha: %s is not a checkpoint pointer: %w", kv.Key, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Completed returns the job's completed checkpoints, oldest first.
func (l *Leadership) Completed(ctx context.Context) ([]Pointer, error) {
	return l.c.Completed(ctx, l.job)
}

// LastCheckpointID returns the last checkpoint id handed out for the job,
// and false if etcd holds none: the job has not run with high
// availability yet.
func (c *Client) LastCheckpointID(ctx context.Context, job string) (checkpoint.ID, bool, error) {
	key := c.key(job, "checkpoint-id")
	resp, err := c.cl.Get(ctx, key)
	if err != nil {
		return 0, false, fmt.Errorf("ha: last checkpoint id of job %s: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	last, err := parseID(key, resp.Kvs[0].Value)
	return last, err == nil, err
}

func parseID(key string, v []byte) (checkpoint.ID, error) {
	id, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ha: %s holds %q, not a checkpoint id: %w", key, v, err)
	}
	return checkpoint.ID(id), nil
}

// LastCheckpointID is the client's, for the term's job.
func (l *Leadership) LastCheckpointID(ctx context.Context) (checkpoint.ID, bool, error) {
	return l.c.LastCheckpointID(ctx, l.job)
}

// Job is the job the term leads.
func (l *Leadership) Job() string { return l.job }

// TTL is the lease's time to live: how long a write may take before the
// term could have ended.
func (l *Leadership) TTL() time.Duration { return l.c.cfg.TTL }

// End records that the job ended under this term (outcome "finished",
// "stopped with savepoint <id>", "cancelled: <why>" or "failed: <why>"):
// no later term runs it, unless one reopens it (Reopen). Only the leader
// can.
func (l *Leadership) End(ctx context.Context, outcome string) error {
	return l.fenced(ctx, "record that the job ended", clientv3.OpPut(l.c.key(l.job, "ended"), outcome))
}

// The outcomes of a job that a term records (End), besides "cancelled:
// <why>" and "failed: <why>".
const (
	Finished = "finished"
	Stopped  = "stopped with savepoint" // and the savepoint's id
)

// Ended is how a job ended, as a term recorded it (End).
type Ended struct {
	Outcome string
	// Revision is etcd's revision of the record: 0, the job has not
	// ended (or was reopened since).
	Revision int64
}

// Ended returns how job ended, if a term recorded it (End).
func (c *Client) Ended(ctx context.Context, job string) (Ended, error) {
	resp, err := c.cl.Get(ctx, c.key(job, "ended"))
	if err != nil {
		return Ended{}, fmt.Errorf("ha: has job %s ended: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return Ended{}, nil
	}
	return Ended{Outcome: string(resp.Kvs[0].Value), Revision: resp.Kvs[0].ModRevision}, nil
}

// Ended is the client's, for the term's job.
func (l *Leadership) Ended(ctx context.Context) (Ended, error) {
	return l.c.Ended(ctx, l.job)
}

// Reopen deletes the record that the job ended, if it is still the one
// etcd wrote at revision rev: later terms run the job again, from its
// latest checkpoint. Only the leader can.
func (l *Leadership) Reopen(ctx context.Context, rev int64) error {
	if err := l.refused(ctx); err != nil {
		return fmt.Errorf("ha: job %s: reopen: %w", l.job, err)
	}
	key := l.c.key(l.job, "ended")
	txn, err := l.c.cl.Txn(ctx).If(l.guard(), clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("ha: job %s: reopen: %w (%w)", l.job, err, ErrUnknownOutcome)
	}
	if !txn.Succeeded {
		if err := l.refused(ctx); err != nil {
			return fmt.Errorf("ha: job %s: reopen: %w", l.job, err)
		}
		return fmt.Errorf("ha: job %s: reopen: its end was recorded anew since revision %d (another process reopened it, and it ended again)", l.job, rev)
	}
	return nil
}

// Namespace names the etcd keys the term leads in: the etcd cluster (its
// id, which every member answers with) and the prefix. Two namespaces
// elect two leaders of one job.
func (l *Leadership) Namespace() string {
	return fmt.Sprintf("etcd cluster %x, prefix %s", l.cluster, l.c.cfg.Prefix)
}

// Reachable returns nil once etcd answers a read of job's keys, within
// limit; else why not.
func (c *Client) Reachable(ctx context.Context, job string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	_, err := c.cl.Get(ctx, c.key(job, "ended"))
	return err
}

// LoadTLS reads the files of a TLS connection to etcd, as etcd's own
// clients name them (etcdctl --cacert, --cert, --key): the CA that signed
// etcd's certificate (empty: the system's), and this client's certificate
// and key (both or neither). All empty: nil, plain text.
func LoadTLS(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("ha: etcd's CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ha: etcd's CA %s holds no PEM certificate", ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("ha: a client certificate for etcd needs both its certificate (%q) and its key (%q)", cert, key)
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("ha: client certificate for etcd: %w", err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}
