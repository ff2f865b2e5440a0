package ha

// The outside review of the first part of issue 20 wrote these tests; each
// failed on c61c6a6 for the defect its comment describes (in the tense of
// the review), and passes since.

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/etcdtest"
)

// holdProxy forwards TCP to target. While held, it stops forwarding the
// chosen directions (bytes wait, nothing is dropped or reset), as a
// congested or half-partitioned network does; release lets them through.
type holdProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	toSrv  bool // hold client→server
	toCl   bool // hold server→client
	closed bool
	cs     []net.Conn
	wg     sync.WaitGroup
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(c, u, func() bool { return p.toSrv })
			go p.pipe(u, c, func() bool { return p.toCl })
		}
	}()
	t.Cleanup(func() {
		p.ln.Close()
		p.mu.Lock()
		p.closed = true
		p.cond.Broadcast()
		for _, c := range p.cs {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *holdProxy) pipe(from, to net.Conn, held func() bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for held() && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			to.Close()
			return
		}
	}
}

func (p *holdProxy) hold(toSrv, toCl bool) {
	p.mu.Lock()
	p.toSrv, p.toCl = toSrv, toCl
	p.cond.Broadcast()
	p.mu.Unlock()
}

// TestReviewConcurrentReserve: Leadership's methods are "safe for
// concurrent use", and a term is the counter's only writer. Forty-eight
// goroutines of the one leader each reserve an id: each is reserved or
// refused as handed out already (a larger one got there first), nothing
// else; the counter ends at the largest.
func TestReviewConcurrentReserve(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	c := dial(t, e.Hosts(), 2*time.Second)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	const n = 48
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = l.Reserve(ctx, checkpoint.ID(i+1))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, ErrIDUsed) {
			t.Errorf("reserve %d of %d concurrent calls by the only leader: %v", i+1, n, err)
		}
	}
	if last, ok, err := l.LastCheckpointID(ctx); err != nil || !ok || last != n {
		t.Errorf("last id %d, %v, %v: want %d", last, ok, err, n)
	}
}

// TestReviewResignedLeaderHandsOutIDs: a leader resigns, its Revoke does
// not get through (here: its context is already done; in life, etcd is
// slow or unreachable for a moment). Err says ErrDeposed ("it resigned"),
// Lost is closed and the renewals stopped; yet the term can still hand out
// checkpoint ids and complete checkpoints for as long as its lease lasts.
func TestReviewResignedLeaderHandsOutIDs(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	c := dial(t, e.Hosts(), 2*time.Second)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	done, cancel := context.WithCancel(ctx)
	cancel()
	rerr := l.Resign(done)
	if !errors.Is(l.Err(), ErrDeposed) {
		t.Fatalf("after Resign: Err %v", l.Err())
	}
	if err := l.Reserve(ctx, 1); err == nil {
		t.Errorf("Resign said %v, Err says %v, and yet Reserve handed out id 1", rerr, l.Err())
	}
	if err := l.Complete(ctx, Pointer{ID: 1, Where: "chk-1"}); err == nil {
		t.Errorf("Err says %v, and yet Complete(1) succeeded", l.Err())
	}
}

// TestReviewLostLeaderCompletes: the leader's network stalls (bytes held,
// not lost) for longer than three quarters of its lease: it steps down on
// its own clock (Lost closed, Err ErrDeposed). The network recovers; the
// held renewals reach etcd late and keep the lease. The leader that said it
// stepped down completes a checkpoint and hands out an id.
func TestReviewLostLeaderCompletes(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	p := newHoldProxy(t, e.Hosts()[0])
	c := dial(t, []string{p.ln.Addr().String()}, 2*time.Second)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	p.hold(true, true)
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost with the network held for 5 s")
	}
	p.hold(false, false)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := l.Complete(cctx, Pointer{ID: 7, Where: "chk-7"})
	err2 := l.Reserve(cctx, 1)
	if err == nil || err2 == nil {
		t.Errorf("after Lost (%v): Complete(7) → %v; Reserve(1) → %v", l.Err(), err, err2)
	}
}

// TestReviewCancelledCampaignLeavesLeaderKey: a campaign's context ends
// while its election write is on the way back (etcd applied it; the answer
// comes after the caller gave up). Campaign fails, but its key, on a lease
// it neither revokes nor renews any more, stays: etcd lists as the job's
// leader a candidate that no process is, and the next candidate waits out
// that whole lease before it can lead.
func TestReviewCancelledCampaignLeavesLeaderKey(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	applied := make(chan struct{})
	var once sync.Once
	late := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		first := false
		if method == "/etcdserverpb.KV/Txn" {
			once.Do(func() { first = true })
		}
		if !first {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		// The election's write: etcd applies it, the answer is late.
		err := invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
		close(applied)
		<-ctx.Done()
		_ = err
		return ctx.Err()
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: e.Hosts(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(late)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	a := &Client{cl: cl, cfg: Config{Endpoints: e.Hosts(), TTL: 5 * time.Second, Prefix: "/test"}.withDefaults()}
	b := dial(t, e.Hosts(), 5*time.Second)
	actx, acancel := context.WithCancel(ctx)
	ra := campaign(a, "job", "a", actx)
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("a's election write never went out")
	}
	acancel()
	if r := <-ra; r.err == nil {
		r.l.end()
		t.Fatal("the campaign led though its answer came after its context ended")
	} else {
		t.Logf("a's campaign: %v", r.err)
	}
	// Its lease is revoked in the background: well within its 5 s.
	deadline := time.Now().Add(2 * time.Second)
	for cs, err := b.Candidates(ctx, "job"); err != nil || len(cs) != 0; cs, err = b.Candidates(ctx, "job") {
		if time.Now().After(deadline) {
			t.Fatalf("a's campaign failed and a campaigns no more, yet 2 s later etcd lists candidates %+v (%v)", cs, err)
		}
		time.Sleep(10 * time.Millisecond) // polls etcd for a condition
	}
	start := time.Now()
	lb := wait(t, campaign(b, "job", "b", ctx), 15*time.Second).l
	defer lb.end()
	if d := time.Since(start); d > time.Second {
		t.Errorf("b led only %v after a's campaign failed: it waited for a's abandoned key's lease to run out", d.Round(time.Millisecond))
	}
}

// TestReviewCancelledCampaignLeavesLease: a standby's campaign is
// cancelled. Campaign returns; the lease it was granted was neither
// revoked nor (any longer) renewed: it stayed in etcd for a whole time to
// live. Resign revokes; a cancelled or failed campaign does too now.
func TestReviewCancelledCampaignLeavesLease(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	a := dial(t, e.Hosts(), 5*time.Second)
	b := dial(t, e.Hosts(), 5*time.Second)
	la := wait(t, campaign(a, "job", "a", ctx), 10*time.Second).l
	defer la.end()
	bctx, bcancel := context.WithCancel(ctx)
	rb := campaign(b, "job", "b", bctx)
	waitCandidates(t, a, "job", 2)
	before := leases(t, b)
	bcancel()
	if r := <-rb; r.err == nil {
		t.Fatal("a cancelled campaign led")
	}
	// The lease is revoked in the background: well within its 5 s.
	deadline := time.Now().Add(2 * time.Second)
	for after := leases(t, b); after >= before; after = leases(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled campaign left its lease in etcd: %d leases before the cancel, %d 2 s after (a's is one)", before, after)
		}
		time.Sleep(10 * time.Millisecond) // polls etcd for a condition
	}
}

func leases(t *testing.T, c *Client) int {
	t.Helper()
	resp, err := c.cl.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// TestReviewParseURLIPv6: etcd endpoints may be IPv6 literals
// ([::1]:2379, as Go's net.JoinHostPort writes them, and as clientv3
// takes them).
func TestReviewParseURLIPv6(t *testing.T) {
	cfg, err := ParseURL("etcd://[::1]:2379,[fe80::1]:2380/jobs")
	if err != nil || strings.Join(cfg.Endpoints, " ") != "[::1]:2379 [fe80::1]:2380" || cfg.Prefix != "/jobs" {
		t.Errorf("etcd://[::1]:2379,[fe80::1]:2380/jobs: got %+v, %v", cfg, err)
	}
}

// TestReviewCheckpointIDWraps: the counter at the largest id: the next id
// must be refused, not wrap to 1 (an id going backwards, which would
// collide with the job's first checkpoints).
func TestReviewCheckpointIDWraps(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	c := dial(t, e.Hosts(), 2*time.Second)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	if err := l.Reserve(ctx, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctx, 1); !errors.Is(err, ErrIDUsed) {
		t.Errorf("checkpoint id 1 after %d: %v, want ErrIDUsed", uint64(math.MaxUint64), err)
	}
}

// TestReviewNestedPrefixes: two deployments on one etcd, with prefixes
// /weir and /weir/x (ParseURL takes both). Job "x" of the first and job
// "completed" of the second are different jobs, yet the first's Completed
// returns the second's checkpoint as its own restore point.
func TestReviewNestedPrefixes(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	c1, err := Dial(Config{Endpoints: e.Hosts(), TTL: 2 * time.Second, Prefix: "/weir"})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := Dial(Config{Endpoints: e.Hosts(), TTL: 2 * time.Second, Prefix: "/weir/x"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	l := wait(t, campaign(c2, "completed", "other", ctx), 10*time.Second).l
	defer l.end()
	if err := l.Complete(ctx, Pointer{ID: 3, Where: "other-job/chk-3"}); err != nil {
		t.Fatal(err)
	}
	ps, err := c1.Completed(ctx, "x")
	if err != nil || len(ps) != 0 {
		t.Errorf("job x under /weir: completed %+v, %v (job completed under /weir/x wrote them)", ps, err)
	}
	cs, err := c1.Candidates(ctx, "x")
	if err != nil || len(cs) != 0 {
		t.Errorf("job x under /weir: candidates %+v, %v", cs, err)
	}
}

// TestReviewCancelledCampaignHangsWhileCutOff: a standby is cut off from
// etcd (its bytes held), and its caller gives up: Campaign promises to
// return when ctx ends, but it waits for etcd as long as the cut lasts
// (the election's clean-up deletes the key under the client's own
// context, which has no deadline).
func TestReviewCancelledCampaignHangsWhileCutOff(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	p := newHoldProxy(t, e.Hosts()[0])
	a := dial(t, e.Hosts(), 2*time.Second)
	b := dial(t, []string{p.ln.Addr().String()}, 2*time.Second)
	la := wait(t, campaign(a, "job", "a", ctx), 10*time.Second).l
	defer la.end()
	bctx, bcancel := context.WithCancel(ctx)
	rb := campaign(b, "job", "b", bctx)
	waitCandidates(t, a, "job", 2)
	p.hold(true, true)
	defer p.hold(false, false)
	bcancel()
	select {
	case r := <-rb:
		t.Logf("b's campaign returned: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Errorf("b's campaign was cancelled 5 s ago (cut off from etcd) and has not returned")
		p.hold(false, false)
		<-rb
	}
}

// lateClient is a Client whose Txn answers, while late is set, come after
// the caller's context ended (etcd applied them), as answers do on a slow
// network.
func lateClient(t *testing.T, endpoints []string, ttl time.Duration, late *atomic.Bool) *Client {
	t.Helper()
	icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != "/etcdserverpb.KV/Txn" || !late.Load() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
		<-ctx.Done()
		return ctx.Err()
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(icpt)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return &Client{cl: cl, cfg: Config{Endpoints: endpoints, TTL: ttl, Prefix: "/test"}.withDefaults()}
}

// TestReviewFailedCompleteCompleted: Complete's answer comes late (a
// timeout) after etcd applied it. Complete fails, and the checkpoint is
// the job's restore point all the same: the error must say that its
// outcome is unknown, not that it did not complete, so that a coordinator
// does not delete its files. (The outside review found the doc promising
// "a checkpoint whose Complete failed did not complete".)
func TestReviewFailedCompleteCompleted(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	var late atomic.Bool
	c := lateClient(t, e.Hosts(), 2*time.Second, &late)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	late.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := l.Complete(cctx, Pointer{ID: 9, Where: "chk-9"})
	cancel()
	late.Store(false)
	if err == nil {
		t.Fatal("Complete succeeded though its answer came late")
	}
	if !errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrDeposed) {
		t.Fatalf("Complete whose answer came late: %v; want ErrUnknownOutcome", err)
	}
	ps, perr := c.Completed(ctx, "job")
	if perr != nil {
		t.Fatal(perr)
	}
	if len(ps) != 1 || ps[0].ID != 9 {
		t.Fatalf("completed: %+v (etcd applied the late Complete)", ps)
	}
}

// TestReviewDeletedLeaderKeyNotLost: the leader's key is deleted while its
// lease lives (an operator forcing a failover, or cleaning up the job's
// keys). A standby leads at once; the old leader's renewals still succeed,
// so its Lost is never closed: two coordinators go on believing they
// lead. (Its etcd writes are refused; Lost is what tells it to stop
// commanding workers.)
func TestReviewDeletedLeaderKeyNotLost(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	a := dial(t, e.Hosts(), 2*time.Second)
	b := dial(t, e.Hosts(), 2*time.Second)
	la := wait(t, campaign(a, "job", "a", ctx), 10*time.Second).l
	defer la.end()
	rb := campaign(b, "job", "b", ctx)
	waitCandidates(t, a, "job", 2)
	if _, err := a.cl.Delete(ctx, la.key); err != nil {
		t.Fatal(err)
	}
	lb := wait(t, rb, 10*time.Second).l
	defer lb.end()
	select {
	case <-la.Lost():
	case <-time.After(3 * time.Second): // one and a half leases
		t.Errorf("b leads (epoch %d) for 3 s, and a (epoch %d), whose key is gone, has not stepped down", lb.Epoch, la.Epoch)
	}
}

// TestReviewParseURLBadHost: a host with a space (a typo in a flag) is
// taken, and only fails later, lazily, when etcd cannot be reached.
func TestReviewParseURLBadHost(t *testing.T) {
	for _, in := range []string{"etcd://a b:2379", "etcd://user@a:2379"} {
		if cfg, err := ParseURL(in); err == nil {
			t.Errorf("%s: took %+v", in, cfg)
		}
	}
}

// TestReviewForgetMany: Forget takes any number of ids, but puts them all
// in one etcd transaction, and etcd takes at most 128 operations in one
// (--max-txn-ops): forgetting the pointers that piled up (say, while etcd
// was unavailable) fails, every time, with nothing forgotten.
func TestReviewForgetMany(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	c := dial(t, e.Hosts(), 2*time.Second)
	l := wait(t, campaign(c, "job", "a", ctx), 10*time.Second).l
	defer l.end()
	var ids []checkpoint.ID
	for id := checkpoint.ID(1); id <= 200; id++ {
		ids = append(ids, id)
	}
	if err := l.Forget(ctx, ids...); err != nil {
		msg := err.Error()
		t.Errorf("Forget(1…200): …%s", msg[max(0, len(msg)-80):])
	}
}

// TestReviewRevokedLeaseLostLate: the leader's lease is revoked (an
// operator, etcdctl lease revoke). etcd deletes its key and lets the
// standby lead at once; the old leader learns of it only at its next
// renewal, up to a sixth of the lease later, and leads on till then.
func TestReviewRevokedLeaseLostLate(t *testing.T) {
	e := etcdtest.Start(t, 1)
	ctx := context.Background()
	// NB: a 30 s lease is renewed every 5 s: the renewals alone would
	// notice the revocation 2.5 s late on average (later than the 1 s
	// allowed below four times in five).
	a := dial(t, e.Hosts(), 30*time.Second)
	b := dial(t, e.Hosts(), 30*time.Second)
	la := wait(t, campaign(a, "job", "a", ctx), 10*time.Second).l
	defer la.end()
	rb := campaign(b, "job", "b", ctx)
	waitCandidates(t, a, "job", 2)
	if _, err := b.cl.Revoke(ctx, la.lease); err != nil {
		t.Fatal(err)
	}
	won := wait(t, rb, 10*time.Second)
	defer won.l.end()
	select {
	case <-la.Lost():
		// etcd lets b in at once; a hears of it by its watch, as b does.
		if d := la.lostAt().Sub(won.at); d > time.Second {
			t.Errorf("b led %v before a, whose lease was revoked, stepped down", d.Round(time.Millisecond))
		}
	case <-time.After(5 * time.Second):
		t.Errorf("b leads, and a, whose lease was revoked, has not stepped down in 5 s")
	}
}
