package cluster

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
)

// encodings records the Content-Encoding of every response.
type encodings struct {
	http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (e *encodings) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.RoundTripper.RoundTrip(r)
	if err == nil {
		e.mu.Lock()
		e.seen = append(e.seen, resp.Header.Get("Content-Encoding"))
		e.mu.Unlock()
	}
	return resp, err
}

// The control plane's answers go uncompressed, though a client accepts
// gzip (Connect's clients do by default): compressing them cost the
// coordinator more CPU than answering them.
func TestControlPlaneAnswersAreNotCompressed(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "admin")
	tr := &http.Transport{TLSClientConfig: c.tls("admin"), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	rec := &encodings{RoundTripper: tr}
	// No rpcOptions here: a default client, which accepts gzip.
	client := clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: rec}, "https://"+c.coord.Addr())
	resp, err := client.Status(t.Context(), connect.NewRequest(&clusterpb.StatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetJob() != jobGraph.Job {
		t.Fatalf("status of job %q, want %q", resp.Msg.GetJob(), jobGraph.Job)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 1 || rec.seen[0] != "" {
		t.Fatalf("the Status answer's Content-Encoding: %q, want none", rec.seen)
	}
}
