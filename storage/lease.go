package storage

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/weirstream/weir/internal/lockfile"
)

// The lease on object storage.
//
// A run holds a job's checkpoints on object storage by a lease: the
// _lease object names the run (owner, and a token no other run has) and
// until when the lease lasts. Every write of _lease is conditional: it
// creates the object only if there is none (If-None-Match: *), and
// replaces it only if it is still what this run last read or wrote
// (If-Match: <ETag>). Of runs that race for it, exactly one write
// succeeds; the others find the winner's lease and wait for it to end.
//
// A holder renews its lease every quarter of a lease period, each time on
// the condition that _lease is still its own; a failed condition proves
// that another run took the lease (after it expired), and the holder is
// fenced: every later write of checkpoint storage fails with
// ErrLeaseLost, and the runtime fails the job for good. Commit renews the
// lease, conditionally, right before it writes the metadata, and gives
// that write at most three quarters of a lease period: a run commits a
// checkpoint only while it has just proven it holds the lease. Other
// writes are refused once the last successful renewal is three quarters
// of a period old (ErrUnavailable: renewals may yet succeed).
//
// NB: like every lease, this assumes the clocks of the runs' hosts differ
// by less than a quarter of a lease period, and that the store applies a
// write within that time of its answer being lost; S3 offers no way to
// make the metadata write itself conditional on another object.

// ErrLeaseLost is wrapped by the errors of a run whose lease on object
// storage another run took: that run must stop before it commits anything,
// and a restart cannot fix it.
var ErrLeaseLost = errors.New("the lease on the checkpoint storage was taken by another run")

// ErrNoConditionalWrites is wrapped by Lock's error when the object store
// does not honour conditional writes (If-None-Match, If-Match), without
// which two runs could both take the lease.
var ErrNoConditionalWrites = errors.New("the object store ignores conditional writes (If-None-Match, If-Match)")

const (
	leaseKey = "_lease"
	// probeKey is written by Lock to learn whether the store honours
	// conditional writes.
	probeKey = "_lease.probe"
)

// plantedDefect11, set only by the planted-bug test of the start-race
// generator, brings issue 19's defect 11 back: Lock reads _lease and
// writes it unconditionally, a read error counts as no lease, renewals
// never check whose the lease is, and nothing is fenced.
var plantedDefect11 atomic.Bool

// leaseRecord is the _lease object: which run uses the checkpoints.
type leaseRecord struct {
	Owner string `json:"owner"`
	// Token is random, one per Lock: it tells two runs apart whose owner
	// text is alike, and makes each run's writes differ (so do their
	// ETags).
	Token   string    `json:"token,omitempty"`
	Expires time.Time `json:"expires"`
}

// errNoObject and errConflict are a casStore's answers: the object is
// absent; the write's condition failed.
var (
	errNoObject = errors.New("no such object")
	errConflict = errors.New("condition failed")
)

// casStore reads and writes objects with compare-and-swap on their ETags.
type casStore interface {
	// get returns the object at key and its ETag, or errNoObject.
	get(ctx context.Context, key string) ([]byte, string, error)
	// put writes data at key if the object's ETag is ifMatch, or if there
	// is no object when ifMatch is "". A failed condition is errConflict.
	put(ctx context.Context, key string, data []byte, ifMatch string) error
}

// s3CAS is S3's conditional PUT (If-None-Match: *, If-Match: <ETag>).
type s3CAS struct{ bucket *blob.Bucket }

func (c s3CAS) get(ctx context.Context, key string) ([]byte, string, error) {
	r, err := c.bucket.NewReader(ctx, key, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, "", errNoObject
	} else if err != nil {
		return nil, "", err
	}
	defer r.Close()
	var out s3.GetObjectOutput
	if !r.As(&out) || aws.ToString(out.ETag) == "" {
		return nil, "", fmt.Errorf("read %s: %w: it gave no ETag", key, ErrNoConditionalWrites)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", err
	}
	return data, aws.ToString(out.ETag), nil
}

func (c s3CAS) put(ctx context.Context, key string, data []byte, ifMatch string) error {
	opts := &blob.WriterOptions{IfNotExist: ifMatch == ""}
	if ifMatch != "" {
		opts.BeforeWrite = func(as func(any) bool) error {
			var in *transfermanager.UploadObjectInput
			if !as(&in) {
				return fmt.Errorf("write %s: %w: the client cannot set If-Match", key, ErrNoConditionalWrites)
			}
			in.IfMatch = aws.String(ifMatch)
			return nil
		}
	}
	err := c.bucket.WriteAll(ctx, key, data, opts)
	// NB: S3 answers an If-Match write of a missing object with 404, and
	// one that races another conditional write of the key with 409.
	var ae smithy.APIError
	switch code := gcerrors.Code(err); {
	case err == nil:
		return nil
	case code == gcerrors.FailedPrecondition, code == gcerrors.NotFound && ifMatch != "",
		errors.As(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict":
		return fmt.Errorf("write %s: %w: %w", key, errConflict, err)
	default:
		return err
	}
}

// memCAS serves mem:// buckets, which live in this process only: a
// process-wide mutex makes compare-and-swap on them exact.
type memCAS struct{ bucket *blob.Bucket }

var memCASMu sync.Mutex

func (c memCAS) get(ctx context.Context, key string) ([]byte, string, error) {
	memCASMu.Lock()
	defer memCASMu.Unlock()
	a, err := c.bucket.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, "", errNoObject
	} else if err != nil {
		return nil, "", err
	}
	data, err := c.bucket.ReadAll(ctx, key)
	return data, a.ETag, err
}

func (c memCAS) put(ctx context.Context, key string, data []byte, ifMatch string) error {
	memCASMu.Lock()
	defer memCASMu.Unlock()
	a, err := c.bucket.Attributes(ctx, key)
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound:
		if ifMatch != "" {
			return fmt.Errorf("write %s: %w: it is gone", key, errConflict)
		}
	case err != nil:
		return err
	case ifMatch == "" || a.ETag != ifMatch:
		return fmt.Errorf("write %s: %w: it changed", key, errConflict)
	}
	return c.bucket.WriteAll(ctx, key, data, nil)
}

// probe makes sure the store honours conditional writes: on a store that
// ignores them, two runs could both take the lease.
func (b *Blob) probe(ctx context.Context) error {
	if err := b.bucket.WriteAll(ctx, probeKey, []byte("weir: does this store honour conditional writes?"), nil); err != nil {
		return fmt.Errorf("checkpoint storage %s: write %s: %w", b.where, probeKey, unavailable(err))
	}
	for _, ifMatch := range []string{"", `"0123456789abcdef0123456789abcdef"`} {
		err := b.cas.put(ctx, probeKey, []byte("weir: this write must be refused"), ifMatch)
		if err == nil {
			cond := "If-None-Match: * on an object that exists"
			if ifMatch != "" {
				cond = "If-Match on an ETag it does not have"
			}
			return fmt.Errorf("checkpoint storage %s: %w: it accepted a write with %s, so it cannot keep two runs of the job from using the checkpoints at once; use S3 or a store that implements S3's conditional writes", b.where, ErrNoConditionalWrites, cond)
		}
		if !errors.Is(err, errConflict) {
			if errors.Is(err, ErrNoConditionalWrites) {
				return fmt.Errorf("checkpoint storage %s: %w", b.where, err)
			}
			return fmt.Errorf("checkpoint storage %s: probe conditional writes (%s): %w", b.where, probeKey, unavailable(err))
		}
	}
	return nil
}

// Lock claims the job's checkpoints for this run with a lease it renews
// until Close (see the comment on the lease above). A run whose lease is
// current holds them: Lock waits for its lease to expire (a run that was
// killed renews it no more), and fails, naming it and wrapping
// lockfile.ErrLocked, if it is still renewed after two lease periods. A
// store that ignores conditional writes is refused (ErrNoConditionalWrites);
// _lease that cannot be read fails Lock (ErrUnavailable), as a lease
// record that is not one does.
func (b *Blob) Lock() (io.Closer, error) {
	if err := b.refuseLed(); err != nil {
		return nil, err
	}
	if plantedDefect11.Load() {
		return b.lockUnconditionally()
	}
	ctx := bg()
	if err := b.probe(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	token := make([]byte, 12)
	rand.Read(token)
	me := leaseRecord{Owner: cmp.Or(b.owner, fmt.Sprintf("pid %d on %s, since %s", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))), Token: hex.EncodeToString(token)}
	giveUp := time.Now().Add(2 * b.lease)
	waitedFor := "" // the holder whose lease Lock said it waits for
	for {
		data, etag, err := b.cas.get(ctx, leaseKey)
		switch {
		case errors.Is(err, errNoObject):
			etag = ""
		case err != nil:
			return nil, fmt.Errorf("checkpoint storage %s: read its lease %s: %w", b.where, leaseKey, unavailable(err))
		default:
			var l leaseRecord
			if err := json.Unmarshal(data, &l); err != nil {
				return nil, fmt.Errorf("checkpoint storage %s: its lease %s is not a lease record (%v): if no run uses the storage, delete %s", b.where, leaseKey, err, leaseKey)
			}
			if l.Token == me.Token {
				// This Lock's own write, applied with its answer lost (the
				// SDK's retry then failed its condition): the lease is ours.
				// NB: it waited for its own lease to run out.
				return b.hold(&lease{b: b, rec: l, etag: etag, validUntil: l.Expires.Add(-b.lease / 4), stop: make(chan struct{}), done: make(chan struct{})}), nil
			}
			if time.Now().Before(l.Expires) {
				if time.Now().After(giveUp) {
					return nil, fmt.Errorf("checkpoint storage %s is %w by another run (%s), which keeps renewing its lease: stop that run first",
						b.where, lockfile.ErrLocked, l.Owner)
				}
				if b.log != nil && l.Owner != waitedFor {
					waitedFor = l.Owner
					b.log.Warn("waiting for another run's lease on the checkpoint storage to expire (a run that was killed renews it no more); if it is renewed, giving up",
						"storage", b.where, "holder", l.Owner, "expires", l.Expires.Local().Format(time.TimeOnly), "give-up", giveUp.Local().Format(time.TimeOnly))
				}
				// The other run's lease runs out, or it is time to give up.
				time.Sleep(min(time.Until(l.Expires), time.Until(giveUp), b.lease) + 10*time.Millisecond)
				continue
			}
		}
		// No lease, or an expired one: take it, on the condition that
		// no other run did since we read it.
		l := &lease{b: b, rec: me, stop: make(chan struct{}), done: make(chan struct{})}
		err = l.write(ctx, etag)
		if errors.Is(err, errConflict) {
			continue // another run was first: look at its lease
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage %s: take the lease: %w", b.where, unavailable(err))
		}
		return b.hold(l), nil
	}
}

// hold makes l the lease this run holds, and renews it until Close.
func (b *Blob) hold(l *lease) *lease {
	b.held.Store(l)
	go l.renewing()
	return l
}

// lease is a lease this run took; Close releases it.
type lease struct {
	b   *Blob
	rec leaseRecord // Expires is that of the last write

	mu sync.Mutex // serialises the renewals: the goroutine's and Commit's
	// etag is that of the last write, "" when not known (its answer was
	// lost, or reading it back failed): the next renewal reads it.
	etag string
	// validUntil is when this run stops trusting its lease unless renewed:
	// a quarter period before the others may take it.
	validUntil time.Time
	lost       error // wraps ErrLeaseLost, once another run took the lease

	stop, done chan struct{}
	once       sync.Once
}

// write writes the lease record with a new expiry on the condition that
// _lease's ETag is ifMatch ("" = there is none), and learns the ETag of
// what it wrote. l.mu is held, or l is not shared yet.
func (l *lease) write(ctx context.Context, ifMatch string) error {
	rec := l.rec
	sent := time.Now()
	rec.Expires = sent.Add(l.b.lease).UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		panic(fmt.Sprintf("storage: encode the lease record: %v", err))
	}
	l.etag = ""
	if err := l.b.cas.put(ctx, leaseKey, data, ifMatch); err != nil {
		return err
	}
	l.rec, l.validUntil = rec, sent.Add(l.b.lease-l.b.lease/4)
	// NB: S3 does not return the ETag through gocloud's writer; no other
	// run writes _lease before it expires, so reading it back is safe.
	if got, etag, err := l.b.cas.get(ctx, leaseKey); err == nil && string(got) == string(data) {
		l.etag = etag
	}
	return nil
}

// renew extends the lease on the condition that it is still this run's.
// A failed condition fences the run (ErrLeaseLost); another error proves
// nothing and is retried at the next renewal.
func (l *lease) renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if l.etag == "" {
		// The last write's ETag is not known: it is this run's write if
		// the record holds this run's token.
		data, etag, err := l.b.cas.get(ctx, leaseKey)
		if errors.Is(err, errNoObject) {
			return l.lose("its lease %s is gone", leaseKey)
		} else if err != nil {
			return fmt.Errorf("checkpoint storage %s: renew the lease: %w", l.b.where, unavailable(err))
		}
		var cur leaseRecord
		if json.Unmarshal(data, &cur) != nil || cur.Token != l.rec.Token {
			return l.lose("%s holds the lease", cur.Owner)
		}
		l.etag = etag
	}
	err := l.write(ctx, l.etag)
	if errors.Is(err, errConflict) {
		holder := "another run"
		data, etag, gerr := l.b.cas.get(ctx, leaseKey)
		var cur leaseRecord
		switch {
		case gerr != nil && !errors.Is(gerr, errNoObject):
			return fmt.Errorf("checkpoint storage %s: renew the lease: %w", l.b.where, unavailable(gerr))
		case gerr == nil && json.Unmarshal(data, &cur) == nil && cur.Token == l.rec.Token:
			// This renewal's own write: it was applied, its answer lost,
			// and the SDK's retry of it failed the condition it had
			// changed. Only this run writes its token.
			l.rec, l.etag, l.validUntil = cur, etag, cur.Expires.Add(-l.b.lease/4)
			return nil
		case gerr == nil && cur.Owner != "":
			holder = cur.Owner
		}
		return l.lose("%s holds the lease", holder)
	}
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: renew the lease: %w", l.b.where, unavailable(err))
	}
	return nil
}

// lose fences the run for good. l.mu is held.
func (l *lease) lose(format string, args ...any) error {
	l.lost = fmt.Errorf("checkpoint storage %s: %w (%s): this run (%s) must stop before it commits anything",
		l.b.where, ErrLeaseLost, fmt.Sprintf(format, args...), l.rec.Owner)
	return l.lost
}

// check reports whether the run may write checkpoint storage now, without
// asking the store: not if it lost its lease (ErrLeaseLost) or has not
// renewed it for three quarters of a period (ErrUnavailable).
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if time.Now().After(l.validUntil) {
		return fmt.Errorf("checkpoint storage %s: the lease has not been renewed since %s (%w): no write until it is",
			l.b.where, l.validUntil.Add(-(l.b.lease - l.b.lease/4)).UTC().Format(time.RFC3339Nano), ErrUnavailable)
	}
	return nil
}

// Held is nil while the run holds its lease, and wraps ErrLeaseLost once
// another run took it.
func (l *lease) Held() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

func (l *lease) renewing() {
	defer close(l.done)
	t := time.NewTicker(l.b.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if errors.Is(l.renew(bg()), ErrLeaseLost) {
				<-l.stop
				return
			}
			// Another failure is retried at the next tick: the lease
			// outlives two.
		case <-l.stop:
			l.release()
			return
		}
	}
}

// release ends the lease, if it is still this run's, by writing it
// expired: the next run need not wait.
func (l *lease) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return
	}
	if l.etag == "" {
		data, etag, err := l.b.cas.get(bg(), leaseKey)
		var cur leaseRecord
		if err != nil || json.Unmarshal(data, &cur) != nil || cur.Token != l.rec.Token {
			return
		}
		l.etag = etag
	}
	rec := l.rec
	rec.Expires = time.Time{}
	data, _ := json.Marshal(rec)
	l.b.cas.put(bg(), leaseKey, data, l.etag) // if this fails, the lease runs out
	l.lost = fmt.Errorf("checkpoint storage %s: %w (this run released it)", l.b.where, ErrLeaseLost)
}

func (l *lease) Close() error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	l.b.held.CompareAndSwap(l, nil)
	return nil
}

// fence is nil if b may be written now: it holds no lease (a tool that
// does not take one, or a run after Close), or holds its lease.
func (b *Blob) fence() error {
	if l := b.held.Load(); l != nil {
		return l.check()
	}
	return nil
}

// commitWindow renews b's lease, if it holds one, on the condition that it
// is still its own, and returns a context for the commit's write that ends
// before any other run may take the lease.
func (b *Blob) commitWindow() (context.Context, context.CancelFunc, error) {
	l := b.held.Load()
	if l == nil {
		ctx, cancel := context.WithCancel(bg())
		return ctx, cancel, nil
	}
	if err := l.renew(bg()); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	until := l.validUntil
	l.mu.Unlock()
	ctx, cancel := context.WithDeadline(bg(), until)
	return ctx, cancel, nil
}

// lockUnconditionally is Lock as it was before issue 19's defect 11 was
// fixed, for the planted-bug test only.
func (b *Blob) lockUnconditionally() (io.Closer, error) {
	host, _ := os.Hostname()
	owner := cmp.Or(b.owner, fmt.Sprintf("pid %d on %s, since %s", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339)))
	giveUp := time.Now().Add(2 * b.lease)
	for {
		data, err := b.bucket.ReadAll(bg(), leaseKey)
		var l leaseRecord
		if err != nil || json.Unmarshal(data, &l) != nil || !time.Now().Before(l.Expires) {
			break
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("checkpoint storage %s is %w by another run (%s), which keeps renewing its lease: stop that run first",
				b.where, lockfile.ErrLocked, l.Owner)
		}
		time.Sleep(min(time.Until(l.Expires), b.lease) + 10*time.Millisecond)
	}
	renew := func() error {
		data, _ := json.Marshal(leaseRecord{Owner: owner, Expires: time.Now().Add(b.lease)})
		return b.bucket.WriteAll(bg(), leaseKey, data, nil)
	}
	if err := renew(); err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: take the lease: %w", b.where, err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(b.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				renew()
			case <-stop:
				b.bucket.Delete(bg(), leaseKey)
				return
			}
		}
	}()
	var once sync.Once
	return closer(func() error { once.Do(func() { close(stop) }); <-done; return nil }), nil
}

type closer func() error

func (c closer) Close() error { return c() }
