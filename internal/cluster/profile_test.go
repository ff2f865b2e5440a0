package cluster

import (
	"io"
	"net/http"
	"runtime/pprof"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
)

// TestOnlyTheCoordinatorProfilesAWorker: a worker's CPU profile is the
// coordinator's to take (a worker's or an admin's certificate is
// refused), for 1 s to 30 s, one at a time in the process; it comes back
// in pprof's format.
func TestOnlyTheCoordinatorProfilesAWorker(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1", "admin")
	addr := serveWorkerService(t, c.tls("worker-1"))
	prof := func(as string, d time.Duration) ([]byte, error) {
		tr := &http.Transport{TLSClientConfig: c.tls(as), ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		cl := clusterpbconnect.NewWorkerServiceClient(&http.Client{Transport: tr}, "https://"+addr, rpcOptions)
		resp, err := cl.Profile(t.Context(), connect.NewRequest(&clusterpb.ProfileRequest{DurationMs: d.Milliseconds()}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetProfile(), nil
	}
	for _, as := range []string{"worker-1", "admin"} {
		if _, err := prof(as, time.Second); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("%s's certificate profiling a worker: %v", as, err)
		}
	}
	for _, d := range []time.Duration{0, 31 * time.Second} {
		if _, err := prof("coordinator", d); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("a profile of %v: %v", d, err)
		}
	}
	if err := pprof.StartCPUProfile(io.Discard); err != nil { // another profile of the process
		t.Fatal(err)
	}
	_, err := prof("coordinator", time.Second)
	pprof.StopCPUProfile()
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a profile while another is taken: %v", err)
	}
	start := time.Now()
	data, err := prof("coordinator", time.Second)
	if err != nil {
		t.Fatalf("the coordinator profiling a worker: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("a profile of 1s came back after %v", took)
	}
	// NB: not p.DurationNanos ≥ 1s: pprof counts it from when its writer
	// goroutine starts, which a loaded machine delays (CI saw less).
	p, err := profile.ParseData(data)
	if err != nil {
		t.Fatalf("the worker's profile (%d bytes): %v", len(data), err)
	}
	if p.DurationNanos <= 0 {
		t.Fatalf("the worker's profile lasted %dns", p.DurationNanos)
	}
}
