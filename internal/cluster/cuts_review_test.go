package cluster

// An outside review wrote these tests against 7992e50; each failed there.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
)

func placeableNames(ws []Worker) string {
	var s []string
	for _, w := range ws {
		s = append(s, w.Name)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// TestPlaceableKeepsTheWorkersThatStillReachEachOther: worker a's data
// path to every other worker is cut while all four reach the coordinator
// (a's side of a partition). The failed attempt leaves the cuts a-b, a-c,
// a-d. Placeable drops, pair by pair, the name that sorts last, so it
// keeps a, the one worker that reaches nobody, and drops b, c and d, which
// reach each other: a job that needs more than a's slots waits the whole
// cool-down (10 heartbeat timeouts), then is placed on all four, fails on
// the same cut, and waits again, for as long as a lives.
func TestPlaceableKeepsTheWorkersThatStillReachEachOther(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers(jobGraph, time.Second, 0)
	for _, n := range []string{"a", "b", "c", "d"} {
		if _, _, err := m.Register(Worker{Name: n, Slots: 2}, jobGraph, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, peer := range []string{"b", "c", "d"} {
		m.Cut("a", peer, t0) // a's report
		m.Cut(peer, "a", t0) // and each peer's
	}
	ws, slots := m.Placeable(t0)
	if got := placeableNames(ws); got != "b c d" || slots != 6 {
		t.Fatalf("with a cut from b, c and d (which reach each other): placeable %q, %d slots; want b c d, 6 slots", got, slots)
	}
}

// TestOneWorkersReportsDoNotKeepEveryOtherWorkerOut: one holder of a worker
// certificate whose live session reports, for an attempt deployed, that
// its data connection to every other worker failed (a false report, or
// its own broken network) keeps all of them out of placements for 10
// heartbeat timeouts, and again with every report, when its name sorts
// first: the accused are dropped, the accuser stays. The guard against
// reports that kept a job from its slots (only until the next heartbeat)
// does not cover Cut.
func TestOneWorkersReportsDoNotKeepEveryOtherWorkerOut(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: time.Second, Timeout: 5 * time.Second}, "worker-1", "worker-2", "worker-3")
	for _, name := range []string{"worker-1", "worker-2", "worker-3"} {
		stop, _ := c.worker(name, name, c.coord.Addr(), jobGraph)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, err := c.coord.WaitForSlots(ctx, 6, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var s1 uint64
	for _, w := range ws {
		if w.Name == "worker-1" {
			s1 = w.Session
		}
	}
	c.coord.mu.Lock()
	c.coord.deployed = 3 // as if attempts 1 to 3 had been deployed
	c.coord.mu.Unlock()
	accuse := []*clusterpb.TaskReport{{PeerFailed: "worker-2", Error: "planted"}, {PeerFailed: "worker-3", Error: "planted"}}
	err = c.reportAs("worker-1", &clusterpb.ReportRequest{Worker: "worker-1", Session: s1, Attempt: 2, Reports: accuse})
	for { // the accused are suspect until their next heartbeat
		if _, slots := c.coord.Workers(); slots == 6 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the accused never answered a heartbeat again")
		}
		time.Sleep(10 * time.Millisecond) // polls for a condition
	}
	c.coord.mu.Lock()
	ws, slots := c.coord.members.Placeable(c.coord.cfg.Now())
	c.coord.mu.Unlock()
	if len(ws) < 2 || slots < 4 {
		t.Fatalf("after worker-1's one report (answered %v) against worker-2 and worker-3: placeable %q, %d slots; the accuser keeps both accused out (worker-2 and worker-3 reach each other)", err, placeableNames(ws), slots)
	}
}

// TestWaitForSlotsSeesACutExpire: two live workers, cut apart, are
// placeable together again after cutTimeouts heartbeat timeouts (here 5 s).
// Nothing notifies the waiters when a cut expires: WaitForSlots looks
// again only at its log tick (10 s by default, the executor's setting) or
// at an unrelated change, so a job waits up to 10 s beyond the cool-down
// (with a 1 s heartbeat timeout, twice the cool-down).
func TestWaitForSlotsSeesACutExpire(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}, "worker-1", "worker-2")
	for _, name := range []string{"worker-1", "worker-2"} {
		stop, _ := c.worker(name, name, c.coord.Addr(), jobGraph)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, err := c.coord.WaitForSlots(ctx, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	c.coord.cut(ws[0], ws[1])
	cool := cutTimeouts * 500 * time.Millisecond
	wctx, wcancel := context.WithTimeout(t.Context(), cool+2*time.Second)
	defer wcancel()
	if _, err := c.coord.WaitForSlots(wctx, 4, 0); err != nil {
		t.Fatalf("the cut expired %v after it was made, and WaitForSlots had not seen it %v after: %v", cool, time.Since(cutAt).Round(time.Millisecond), err)
	}
}

// TestAPeerClosingOnCancelIsNoCut: when the coordinator stops an attempt
// (a task failed, a third worker was lost), it cancels it on every worker
// at once; a worker's nodeRun.stop stops its tasks, then closes its data
// connections, then cancels the run, so a worker still stopping its tasks
// sees its faster peer's connection end (EOF) and reports, for the
// attempt being stopped, that its data connection to that peer failed.
// The coordinator takes that report as a cut and keeps two healthy workers
// apart for 10 heartbeat timeouts: a job that needs both waits that long
// after every ordinary restart. An orderly close is no cut: a cut network
// ends a connection as ErrPeerSilent, never as EOF.
func TestAPeerClosingOnCancelIsNoCut(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: time.Second, Timeout: 5 * time.Second}, "worker-1", "worker-2")
	for _, name := range []string{"worker-1", "worker-2"} {
		stop, _ := c.worker(name, name, c.coord.Addr(), jobGraph)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, err := c.coord.WaitForSlots(ctx, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var s2 uint64
	for _, w := range ws {
		if w.Name == "worker-2" {
			s2 = w.Session
		}
	}
	c.coord.mu.Lock()
	c.coord.deployed = 1 // attempt 1 was deployed, and has just been stopped (exec nil)
	c.coord.mu.Unlock()
	closed := peerError{"worker-1", errors.New("transport: connection with 127.0.0.1:40123: " + io.EOF.Error())}
	report := reportToProto(runtime.Report{Kind: runtime.ReportFailed, Task: checkpoint.TaskID{Vertex: "src"}, Err: fmt.Errorf("worker worker-2: %w", closed)})
	err = c.reportAs("worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: s2, Attempt: 1, Reports: []*clusterpb.TaskReport{report}})
	ws, slots := c.placeableOnceAllAnswer(ctx, t, 4)
	if slots != 4 {
		t.Fatalf("after worker-2's report (answered %v) that worker-1 closed their connection while attempt 1 was being cancelled: placeable %q, %d slots; want both, for %v", err, placeableNames(ws), slots, cutTimeouts*5*time.Second)
	}
}
