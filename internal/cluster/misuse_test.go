package cluster

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/transport"
)

// Misuse of the control plane by a holder of a certificate of the
// cluster's CA (issue 19, defects 13, 17 and 18).

// waitDone waits for a worker's end, failing at once if event bad happens
// first (or after 20s).
func (c *testCluster) waitDone(done <-chan error, bad string) error {
	c.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		i, changed := c.nth(bad, 1)
		if i >= 0 {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.t.Fatalf("%s: %v", bad, c.events)
		}
		select {
		case err := <-done:
			return err
		case <-changed:
		case <-deadline:
			c.t.Fatalf("the worker still runs after 20s; events: %v", c.events)
		}
	}
}

// Two worker processes given one name: the second is refused, saying why,
// and the first keeps its session (they used to end each other's at every
// registration, each time failing the running attempt).
func TestSecondProcessOfOneNameIsRefused(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1")
	stop, _ := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop()
	c.waitFor("registered worker-1", 1)

	stop2, done := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop2()
	err := c.waitDone(done, "lost worker-1")
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("the second process of worker-1: %v", err)
	}
	for _, want := range []string{`"worker-1" is held by another live process`, "give each its own --name"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not say %q: %v", want, err)
		}
	}
	if c.has("fenced worker-1") {
		t.Fatalf("the first process was fenced: %v", c.events)
	}
	if ws, slots := c.coord.Workers(); len(ws) != 1 || ws[0].Session != 1 || slots != 2 {
		t.Fatalf("workers %+v, %d slots: want the first session's", ws, slots)
	}
}

// A restarted worker whose old process the coordinator cannot see go (its
// connection stays open, silent) gets its name back once the old session
// misses its heartbeats.
func TestRestartedWorkerGetsItsNameAfterTheTimeout(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, "worker-1")
	p := newProxy(t, c.coord.Addr())
	stop1, _ := c.worker("worker-1", "worker-1", p.ln.Addr().String(), jobGraph)
	defer stop1()
	c.waitFor("registered worker-1", 1)
	p.cut.Store(true)

	stop2, done := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop2()
	c.waitFor("registered worker-1", 2)
	c.waitFor("lost worker-1", 1)
	if ws, _ := c.coord.Workers(); len(ws) != 1 || ws[0].Session != 2 {
		t.Fatalf("workers %+v: want the restarted process's session 2", ws)
	}
	select {
	case err := <-done:
		t.Fatalf("the restarted worker ended: %v", err)
	default:
	}
}

// A certificate made for weir status holds the admin role: it cannot
// register as a worker, and a worker's cannot command a worker.
func TestRolesAreEnforced(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1", "admin")
	stopAdmin, done := c.worker("admin", "admin", c.coord.Addr(), jobGraph)
	defer stopAdmin()
	err := c.waitDone(done, "registered admin")
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `the certificate of "admin" holds the admin role; only a worker's may act as a worker`) {
		t.Fatalf("an admin's certificate registering as a worker: %v", err)
	}
	if st, err := FetchStatus(t.Context(), c.coord.Addr(), c.tls("admin")); err != nil || st.GetJob() != jobGraph.Job {
		t.Fatalf("an admin reading status: %v, %v", st, err)
	}

	// A worker's server answers only the coordinator.
	addr := serveWorkerService(t, c.tls("worker-1"))
	cancel := func(as string) error {
		tr := &http.Transport{TLSClientConfig: c.tls(as), ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		cl := clusterpbconnect.NewWorkerServiceClient(&http.Client{Transport: tr}, "https://"+addr, rpcOptions)
		_, err := cl.Cancel(t.Context(), connect.NewRequest(&clusterpb.CancelRequest{Attempt: 1}))
		return err
	}
	for _, as := range []string{"worker-1", "admin"} {
		if err := cancel(as); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "only a coordinator's may command a worker") {
			t.Fatalf("%s's certificate commanding a worker: %v", as, err)
		}
	}
	if err := cancel("coordinator"); err != nil {
		t.Fatalf("the coordinator commanding a worker: %v", err)
	}
}

// serveWorkerService serves an idle worker's WorkerService with tc until
// the test ends, and returns its address.
func serveWorkerService(t *testing.T, tc *tls.Config) string {
	path, h := clusterpbconnect.NewWorkerServiceHandler(&node{}, rpcOptions)
	mux := http.NewServeMux()
	mux.Handle(path, limitBody(withPeer(h)))
	tc = tc.Clone()
	tc.NextProtos = []string{"h2"}
	srv := &http.Server{Handler: mux, TLSConfig: tc}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func (c *testCluster) tls(name string) *tls.Config {
	tc, err := transport.LoadTLS(c.certs, name)
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}

// A worker name of any length is refused with a short error.
func TestLongNameIsRefusedShortly(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1")
	name := strings.Repeat("x", 1<<20)
	tr := &http.Transport{TLSClientConfig: c.tls("worker-1"), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	cl := clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: tr}, "https://"+c.coord.Addr(), rpcOptions)
	_, err := cl.Register(t.Context(), connect.NewRequest(&clusterpb.RegisterRequest{Worker: name, Slots: 1, Graph: graphToProto(jobGraph)}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "names are at most 253 bytes") || len(err.Error()) > 512 {
		t.Fatalf("a name of %d bytes: %.1000v (%d bytes)", len(name), err, len(errString(err)))
	}
	stop, done := c.worker(name, "worker-1", c.coord.Addr(), jobGraph)
	defer stop()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "names are at most 253 bytes") || len(err.Error()) > 512 {
		t.Fatalf("a worker named with %d bytes: %.1000v (%d bytes)", len(name), err, len(errString(err)))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// countingReader produces a Register message of a name of nameBytes
// bytes, counting what was read of it.
type countingReader struct {
	hdr  []byte
	left int64
	read atomic.Int64
}

func newRegisterBody(nameBytes int) *countingReader {
	hdr := []byte{0x0a} // field 1 (worker), length-delimited
	hdr = binary.AppendUvarint(hdr, uint64(nameBytes))
	return &countingReader{hdr: hdr, left: int64(nameBytes)}
}

func (r *countingReader) Read(p []byte) (int, error) {
	n := copy(p, r.hdr)
	r.hdr = r.hdr[n:]
	for ; n < len(p) && r.left > 0; n++ {
		p[n] = 'a'
		r.left--
	}
	r.read.Add(int64(n))
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// An oversized control-plane message is refused without the coordinator
// reading it whole (a 200 MB Register used to take it to 1.18 GB).
func TestOversizedMessageIsRefusedUnread(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1")
	const sizeBytes = 4 * maxMessageBytes
	body := newRegisterBody(sizeBytes)
	tr := &http.Transport{TLSClientConfig: c.tls("worker-1"), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://"+c.coord.Addr()+clusterpbconnect.CoordinatorServiceRegisterProcedure, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Code, Message string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e); err != nil {
		t.Fatalf("the answer to an oversized Register (HTTP %d): %v", resp.StatusCode, err)
	}
	if e.Code != connect.CodeResourceExhausted.String() || len(e.Message) > 512 {
		t.Fatalf("the answer to an oversized Register: HTTP %d, %s: %.1000s", resp.StatusCode, e.Code, e.Message)
	}
	// What HTTP/2's flow control lets the client send ahead is read by no
	// one: bound it by a few windows.
	if read := body.read.Load(); read > maxMessageBytes+8<<20 {
		t.Fatalf("the client sent %d of %d bytes: the coordinator read past its limit of %d", read, sizeBytes, maxMessageBytes)
	}
	if _, slots := c.coord.Workers(); slots != 0 {
		t.Fatalf("%d slots", slots)
	}
}

// Every process's certificate is valid for the cluster's hosts: clients of
// the coordinator check that the server holds the coordinator's role.
func TestOnlyTheCoordinatorsCertificateServesTheCoordinator(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1", "admin")
	fake, err := StartCoordinator(CoordinatorConfig{Graph: jobGraph, TLS: c.tls("worker-1"), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	if _, err := FetchStatus(t.Context(), fake.Addr(), c.tls("admin")); err == nil || !strings.Contains(err.Error(), "holds the worker role, not the coordinator's") {
		t.Fatalf("status from a server with a worker's certificate: %v", err)
	}
}
