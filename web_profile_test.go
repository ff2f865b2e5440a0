package weir_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/internal/web"
)

// burnSum is the reducer of vertex "burn" in the profiled cluster: it
// spends CPU on each record, so that a profile samples it.
//
//go:noinline
func burnSum(a, b int64) int64 {
	x := b
	for i := range 20_000 {
		x = x*31 + int64(i)
	}
	return a + b + x%2
}

// flameFrame is a frame of GET /api/v1/flamegraph's tree.
type flameFrame struct {
	Name     string        `json:"name"`
	Value    int64         `json:"value"`
	Children []*flameFrame `json:"children"`
}

func (f *flameFrame) find(name string) *flameFrame {
	if strings.Contains(f.Name, name) {
		return f
	}
	for _, c := range f.Children {
		if g := c.find(name); g != nil {
			return g
		}
	}
	return nil
}

type flameGraph struct {
	Root     *flameFrame      `json:"root"`
	Samples  int64            `json:"samples"`
	Vertex   string           `json:"vertex"`
	Worker   string           `json:"worker"`
	Vertices map[string]int64 `json:"vertices"`
}

// getWithToken answers GET url with the bearer token (none if empty).
func getWithToken(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestClusterWebFlameGraphOfAWorker runs a cluster of a coordinator and
// two workers in this process, and takes a worker's flame graph of vertex
// "burn" through the coordinator's web server: the coordinator asks the
// worker over the control plane. NB: in one process, the worker's profile
// is the whole process's; what the test shows is the path (token, the
// RPC to the named worker, its vertex labels), not which process ran what.
func TestClusterWebFlameGraphOfAWorker(t *testing.T) {
	const token = "s3cret"
	addr, _ := webCluster{job: "burning", token: token, checkpoints: 500 * time.Millisecond, heartbeat: 200 * time.Millisecond, timeout: 3 * time.Second,
		build: func(env *weir.Environment) error {
			src, err := newRateLimited(2000, 0)
			if err != nil {
				return err
			}
			burn := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 4 }), "burn", burnSum)
			weir.Sink(burn, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
			return nil
		}}.start(t)
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		var got web.Workers
		getJSON(t, base+"/api/v1/workers", &got)
		var ws []string
		for _, w := range got.Workers {
			ws = append(ws, w.Name)
		}
		slices.Sort(ws)
		if slices.Equal(ws, []string{"worker-1", "worker-2"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workers %v, want worker-1 and worker-2", ws)
		}
		time.Sleep(50 * time.Millisecond) // polls the condition
	}
	if code, body := getWithToken(t, base+"/api/v1/flamegraph?seconds=1&worker=worker-1", ""); code != http.StatusUnauthorized {
		t.Fatalf("a worker's flame graph without the token: %d %s", code, body)
	}
	if code, body := getWithToken(t, base+"/api/v1/flamegraph?seconds=1&worker=worker-3", token); code != http.StatusNotFound {
		t.Fatalf("the flame graph of a worker that is not there: %d %s", code, body)
	}
	// The tasks of "burn" run once deployed; a profile of a second may
	// miss them on a loaded machine: profile until it shows them (the
	// other assertions hold of every profile).
	for try := 1; ; try++ {
		code, body := getWithToken(t, base+"/api/v1/flamegraph?seconds=2&vertex=burn&worker=worker-1", token)
		if code != http.StatusOK {
			t.Fatalf("worker-1's flame graph of vertex burn: %d %s", code, body)
		}
		var g flameGraph
		if err := json.Unmarshal(body, &g); err != nil {
			t.Fatal(err)
		}
		if g.Worker != "worker-1" || g.Vertex != "burn" || g.Root == nil || g.Root.Value != g.Samples {
			t.Fatalf("worker-1's flame graph of vertex burn: %s", body)
		}
		if f := g.Root.find("connector/generator"); f != nil {
			t.Fatalf("the flame graph of vertex burn holds the source's %s", f.Name)
		}
		if f := g.Root.find("weir_test.burnSum"); f != nil && f.Value > 0 {
			t.Logf("profile %d: %d samples of vertex burn, %d in burnSum; by vertex %v", try, g.Samples, f.Value, g.Vertices)
			break
		}
		if try == 10 {
			t.Fatalf("10 profiles of worker-1 did not sample burnSum: samples by vertex %v", g.Vertices)
		}
	}
}
