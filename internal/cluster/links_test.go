package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
)

// isClosed reports whether end's other side was closed (net.Pipe).
func isClosed(t *testing.T, end net.Conn) bool {
	t.Helper()
	end.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := end.Read(make([]byte, 1))
	end.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrClosedPipe):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	t.Fatalf("read: %v", err)
	return false
}

// Connections planted for future attempts: a peer holds at most one that
// no attempt has taken (300 of them used to hold 300 descriptors).
func TestArrivalsHoldOnePendingConnectionPerPeer(t *testing.T) {
	var a arrivals
	defer a.forget(1 << 62)
	var ends []net.Conn
	for attempt := uint64(100); attempt < 400; attempt++ {
		ours, theirs := net.Pipe()
		defer theirs.Close()
		ends = append(ends, theirs)
		a.arrive(linkKey{attempt, "worker-2"}, ours, 1)
	}
	// One of another peer's is held beside it.
	ours, theirs := net.Pipe()
	defer theirs.Close()
	a.arrive(linkKey{200, "worker-3"}, ours, 1)
	open := 0
	for _, e := range ends {
		if !isClosed(t, e) {
			open++
		}
	}
	if open != 1 || isClosed(t, ends[len(ends)-1]) || isClosed(t, theirs) {
		t.Fatalf("%d of worker-2's 300 connections open, want its newest only; worker-3's closed: %v", open, isClosed(t, theirs))
	}
	// An older attempt's after a newer one is refused.
	old, oldEnd := net.Pipe()
	defer oldEnd.Close()
	if err := a.arrive(linkKey{150, "worker-2"}, old, 1); err == nil || !isClosed(t, oldEnd) {
		t.Fatalf("a connection of an older attempt after a newer: %v", err)
	}
}

// A second connection for an attempt and peer, after the attempt took the
// first, closes both: the link fails instead of reading from a connection
// that may be planted (one holding a partial frame stalled an attempt for
// 57s, the other sitting in the slot unused).
func TestArrivalsCloseDuplicates(t *testing.T) {
	var a arrivals
	defer a.forget(1 << 62)
	k := linkKey{7, "worker-2"}
	first, firstEnd := net.Pipe()
	defer firstEnd.Close()
	if err := a.arrive(k, first, 7); err != nil {
		t.Fatal(err)
	}
	<-a.ready(k)
	taken, err := a.take(k)
	if err != nil || taken != first {
		t.Fatalf("take: %v, %v", taken, err)
	}
	second, secondEnd := net.Pipe()
	defer secondEnd.Close()
	if err := a.arrive(k, second, 7); err == nil {
		t.Fatal("a second connection for one attempt was accepted")
	}
	if !isClosed(t, secondEnd) || !isClosed(t, firstEnd) {
		t.Fatalf("after a duplicate: second closed %v, first (taken) closed %v; want both", isClosed(t, secondEnd), isClosed(t, firstEnd))
	}

	// Two before the attempt takes either: it takes neither.
	k = linkKey{8, "worker-3"}
	for range 2 {
		ours, theirs := net.Pipe()
		defer theirs.Close()
		a.arrive(k, ours, 7)
	}
	<-a.ready(k)
	if nc, err := a.take(k); err == nil {
		t.Fatalf("took %v of two connections for one attempt", nc)
	}
}

// A connection no attempt takes is closed after the pending timeout.
func TestArrivalsCloseUntakenConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := arrivals{timeout: time.Minute}
		ours, theirs := net.Pipe()
		defer theirs.Close()
		a.arrive(linkKey{9, "worker-2"}, ours, 1)
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if isClosed(t, theirs) {
			t.Fatal("closed before the timeout")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isClosed(t, theirs) {
			t.Fatal("open after the timeout")
		}
	})
}

// Reports are split into messages under the control plane's limit, in
// order; one too large alone becomes its task's failure.
func TestSplitReports(t *testing.T) {
	small := func(id uint64) *clusterpb.TaskReport {
		return &clusterpb.TaskReport{Task: &clusterpb.TaskID{Vertex: "count"}, Checkpoint: id, HandlesJson: make([]byte, 100)}
	}
	huge := &clusterpb.TaskReport{Task: &clusterpb.TaskID{Vertex: "sink"}, Checkpoint: 9, HandlesJson: make([]byte, 5000)}
	parts := splitReports([]*clusterpb.TaskReport{small(1), small(2), small(3), huge, small(4)}, 300)
	var got []uint64
	for _, p := range parts {
		size := 0
		for _, r := range p {
			size += proto.Size(r) + 8
			got = append(got, r.GetCheckpoint())
			if r.GetTask().GetVertex() == "sink" && (r.GetKind() != int32(runtime.ReportFailed) || !strings.Contains(r.GetError(), "over the control plane's limit")) {
				t.Fatalf("the oversized report became %v", r)
			}
		}
		if size > 300 {
			t.Fatalf("a message of %d bytes, over 300", size)
		}
	}
	if !slices.Equal(got, []uint64{1, 2, 3, 0, 4}) || len(parts) != 3 {
		t.Fatalf("checkpoints %v in %d messages", got, len(parts))
	}
}

// TestASilentPeerReportedLateIsStillACut: worker-2's task that wrote to
// the silent connection failed first, and its report stopped the attempt;
// the report that names the silent peer came in a second call, after the
// attempt stopped. It must still keep the two workers apart (CI, stop 30:
// the next attempt was placed on both again, and failed on the same cut).
func TestASilentPeerReportedLateIsStillACut(t *testing.T) {
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
	workers := map[string]Worker{}
	for _, w := range ws {
		workers[w.Name] = w
	}
	c.coord.mu.Lock()
	c.coord.deployed = 1
	c.coord.stopped = &execution{attempt: 1, workers: workers} // attempt 1 has stopped (exec nil)
	c.coord.mu.Unlock()
	silent := peerError{"worker-1", fmt.Errorf("transport: connection with 127.0.0.1:40123: %w", transport.ErrPeerSilent)}
	report := reportToProto(runtime.Report{Kind: runtime.ReportFailed, Task: checkpoint.TaskID{Vertex: "src"}, Err: fmt.Errorf("worker worker-2: %w", silent)})
	err = c.reportAs("worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: workers["worker-2"].Session, Attempt: 1, Reports: []*clusterpb.TaskReport{report}})
	ws, slots := c.placeableOnceAllAnswer(ctx, t, 4)
	if slots != 2 {
		t.Fatalf("after worker-2's late report (answered %v) that its connection to worker-1 went silent in attempt 1: placeable %q, %d slots; want one of them", err, placeableNames(ws), slots)
	}
}

// placeableOnceAllAnswer waits until the workers' slots add up to all
// (the one a report made suspect answered a heartbeat again), and returns
// what the coordinator may place on then.
func (c *testCluster) placeableOnceAllAnswer(ctx context.Context, t *testing.T, all int) ([]Worker, int) {
	t.Helper()
	for {
		if _, slots := c.coord.Workers(); slots == all {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the suspect worker never answered a heartbeat again")
		}
		time.Sleep(10 * time.Millisecond) // polls for a condition
	}
	c.coord.mu.Lock()
	defer c.coord.mu.Unlock()
	return c.coord.members.Placeable(c.coord.cfg.Now())
}
