package storage_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/racetest"
	"github.com/weirstream/weir/storage"
)

// The S3 fault generator: TestStorageFaults's runs (a word count killed
// after a few checkpoints and restored, then run to its end) over checkpoint
// storage in S3 (gofakes3) behind a proxy that, on a schedule drawn from a
// seed, answers a request with a 503 before the store sees it, applies a
// write or a delete and answers 500 (its answer lost: the SDK retries a
// request that already happened, and a conditional write's retry fails its
// condition), answers late, or answers a listing a page of one to three
// keys (the client must follow its continuation tokens). After every run: no restore of an older
// checkpoint than the newest completed, no completed checkpoint retention
// keeps deleted, no run that fails without an injected fault to explain
// it, none that does not end in a minute, no count written twice; at the
// end, every count exactly once.
//
//	go test ./storage -run 'TestS3Faults$' -v -args -s3faults.seeds=50 -s3faults.first=100

var (
	s3FaultSeeds = flag.Int("s3faults.seeds", 0, "number of seeds TestS3Faults runs (default 3; 1 under -short)")
	s3FaultFirst = flag.Uint64("s3faults.first", 1, "first seed of TestS3Faults")
)

// s3Schedule is how often a request meets each fault during one run.
type s3Schedule struct {
	name             string
	fail, lost, slow float64 // lost: of writes and deletes only
	// metadataRead is the probability that a read of a checkpoint's
	// metadata fails, through the client's retries: the reads a start
	// makes to find what to restore.
	metadataRead float64
	// page, if not 0, is the most keys a listing answers at once, however
	// many the client asks for: the listings of a start and of garbage
	// collection go over several pages, as a bucket of many checkpoints
	// makes them. Drawn for a run apart from the schedule, from an rng of
	// its own, and a later page meets no fault: the draws of the schedules
	// and their faults are those of the generator before pages were cut
	// (TestS3FaultsCatchDefect3 catches defect 3 within its seeds).
	page int
}

var s3Schedules = []s3Schedule{
	{name: "no faults"},
	{name: "faults at start", metadataRead: 0.3, fail: 0.02},
	{name: "503s", fail: 0.1},
	{name: "lost answers", lost: 0.2},
	{name: "everything", fail: 0.05, lost: 0.1, slow: 0.1},
}

// s3Proxy serves gofakes3 through the faults of its schedule.
type s3Proxy struct {
	mu       sync.Mutex
	rng      *rand.Rand
	sched    s3Schedule
	injected int
	pages    int // listings whose page was cut
	// continued counts those of them that went on from an earlier page.
	continued int
	// burst counts the attempts of a request (method and path) still to
	// fail: half the 503s fail the S3 client's retries too (it makes three
	// attempts), so that the error reaches the storage's caller.
	burst map[string]int
}

func (p *s3Proxy) set(s s3Schedule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sched = s
}

// draw picks the fault for a request: "" (none), "fail", "lost" or
// "slow"; and cuts a listing's page to the schedule's.
func (p *s3Proxy) draw(r *http.Request, write bool) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("list-type") && p.sched.page > 0 {
		q.Set("max-keys", strconv.Itoa(p.sched.page))
		r.URL.RawQuery = q.Encode()
		p.pages++
		if q.Has("continuation-token") {
			p.continued++
			return ""
		}
	}
	key := r.Method + " " + r.URL.Path
	if p.burst[key] > 0 {
		p.burst[key]--
		return "fail"
	}
	s, x := p.sched, p.rng.Float64()
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/"+storage.MetadataFile) && x < s.metadataRead:
		p.injected++
		if p.burst == nil {
			p.burst = map[string]int{}
		}
		p.burst[key] = 2
		return "fail"
	case x < s.fail:
		p.injected++
		if p.rng.IntN(2) == 0 {
			if p.burst == nil {
				p.burst = map[string]int{}
			}
			p.burst[key] = 2
		}
		return "fail"
	case x < s.fail+s.lost && write:
		p.injected++
		return "lost"
	case x < s.fail+s.lost+s.slow:
		return "slow"
	}
	return ""
}

func (p *s3Proxy) handler(fake http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write := r.Method == http.MethodPut || r.Method == http.MethodDelete || r.Method == http.MethodPost
		switch p.draw(r, write) {
		case "fail":
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<Error><Code>SlowDown</Code><Message>injected before the request</Message></Error>`))
			return
		case "lost":
			fake.ServeHTTP(httptest.NewRecorder(), r) // applied…
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError) // …and its answer lost
			w.Write([]byte(`<Error><Code>InternalError</Code><Message>injected after the request</Message></Error>`))
			return
		case "slow":
			time.Sleep(time.Duration(20+rand.IntN(200)) * time.Millisecond)
		}
		fake.ServeHTTP(w, r)
	})
}

// s3FaultRig is gofakes3 served twice: through the fault proxy, and as it
// is (to check what storage holds).
type s3FaultRig struct {
	backend       *s3mem.Backend
	proxy         *s3Proxy
	faulty, clean *httptest.Server
}

func newS3FaultRig(t *testing.T) *s3FaultRig {
	backend := s3mem.New()
	fake := gofakes3.New(backend).Server()
	r := &s3FaultRig{backend: backend, proxy: &s3Proxy{}, clean: httptest.NewServer(fake)}
	r.faulty = httptest.NewServer(r.proxy.handler(fake))
	t.Cleanup(r.faulty.Close)
	t.Cleanup(r.clean.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "weir")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "weir")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return r
}

// run runs seed in a bucket of its own.
func (r *s3FaultRig) run(seed uint64) (int, error) {
	bucket := fmt.Sprintf("seed%d", seed)
	if err := r.backend.CreateBucket(bucket); err != nil {
		return 0, err
	}
	at := func(srv *httptest.Server) string {
		return "s3://" + bucket + "/weir?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"
	}
	r.proxy.rng, r.proxy.burst = rand.New(rand.NewPCG(seed, 0x53)), nil
	return runS3FaultSeed(seed, r.proxy, at(r.faulty), at(r.clean))
}

// TestS3Faults runs -s3faults.seeds seeds of the generator.
func TestS3Faults(t *testing.T) {
	n := *s3FaultSeeds
	if n == 0 {
		n = 3
		if testing.Short() {
			n = 1
		}
	}
	rig := newS3FaultRig(t)
	runs := 0
	for seed := *s3FaultFirst; seed < *s3FaultFirst+uint64(n); seed++ {
		r, err := rig.run(seed)
		runs += r
		if err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./storage -run 'TestS3Faults$' -v -args -s3faults.seeds=1 -s3faults.first=%d", seed, err, seed)
		}
	}
	rig.proxy.mu.Lock()
	defer rig.proxy.mu.Unlock()
	t.Logf("%d seeds: %d runs, %d faults injected, %d listing pages cut (%d of them a later page)", n, runs, rig.proxy.injected, rig.proxy.pages, rig.proxy.continued)
	if n >= 3 && rig.proxy.injected == 0 {
		t.Fatal("the seeds injected no fault")
	}
}

// TestS3FaultsCatchDefect3 plants defect 3 back (an error reading a
// checkpoint's metadata at a start makes it "damaged") and checks that the
// S3 generator catches it (found by a review: with each 503 drawn per
// request, the client's retries hid every read error).
func TestS3FaultsCatchDefect3(t *testing.T) {
	racetest.Skip(t)
	storage.PlantDefect3(t)
	rig := newS3FaultRig(t)
	const seeds = 6
	for seed := uint64(1); seed <= seeds; seed++ {
		if _, err := rig.run(seed); err != nil {
			t.Logf("caught at seed %d: %.300v", seed, err)
			return
		}
	}
	t.Fatalf("planted defect 3 survived %d seeds of the S3 fault generator", seeds)
}

// runS3FaultSeed runs one seed: up to maxRuns runs with faults, each
// killed after a few checkpoints unless it fails or finishes, then one
// without faults to the end. It returns the runs it made.
func runS3FaultSeed(seed uint64, proxy *s3Proxy, faulty, clean string) (runs int, err error) {
	rng := rand.New(rand.NewPCG(seed, 0x5353))
	pages := rand.New(rand.NewPCG(seed, 0x9a9e))
	data := vfs.NewMem()
	files, err := writeInput(data, rng)
	if err != nil {
		return 0, err
	}
	want, err := wordcount.Expected(data, files)
	if err != nil {
		return 0, err
	}
	scan := func() (storage.Scan, error) {
		b, err := storage.OpenBlob(context.Background(), clean, job)
		if err != nil {
			return storage.Scan{}, err
		}
		return b.Scan()
	}
	var history []string // the runs so far, for a failing seed's report
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nthe runs:\n  %s", err, strings.Join(history, "\n  "))
		}
	}()
	for run := 1; ; run++ {
		final := run > maxRuns
		before, err := scan()
		if err != nil {
			return run - 1, err
		}
		sched := s3Schedules[0]
		if !final {
			sched = s3Schedules[rng.IntN(len(s3Schedules))]
			if sched.page = []int{0, 0, 1, 2, 3}[pages.IntN(5)]; sched.page > 0 {
				sched.name += fmt.Sprintf(", pages of %d", sched.page)
			}
		}
		killAfter := 1 + rng.IntN(2)
		if final {
			killAfter = 0
		}
		proxy.set(sched)
		r := runOnceAt(data, faulty, nil, killAfter, nil)
		history = append(history, fmt.Sprintf("run %d (%s, killed after %d checkpoints): restored %v, completed %v, err %v", run, sched.name, killAfter, r.restoredFrom, r.completed, r.err))
		proxy.set(s3Schedules[0])
		latest := latestID(before)
		for i, from := range r.restoredFrom {
			point := latest
			if i > 0 && len(r.completedBefore[i]) > 0 {
				point = slices.Max(r.completedBefore[i])
			}
			if from != point {
				return run, fmt.Errorf("run %d (%s), attempt %d restored checkpoint %d, want %d, the newest completed; restored %v, completed %v, err %v",
					run, sched.name, i+1, from, point, r.restoredFrom, r.completed, r.err)
			}
		}
		after, err := scan()
		if err != nil {
			return run, err
		}
		keep := append(completedIDs(before), r.completed...)
		slices.Sort(keep)
		keep = slices.Compact(keep)
		keep = keep[max(0, len(keep)-retained):]
		for _, id := range keep {
			if !slices.Contains(completedIDs(after), id) {
				return run, fmt.Errorf("run %d (%s) deleted completed checkpoint %d: before %v, completed in the run %v, after %v; err %v",
					run, sched.name, id, completedIDs(before), r.completed, completedIDs(after), r.err)
			}
		}
		rep, err := wordcount.Verify(data, "/out", want, false)
		if err != nil {
			return run, err
		}
		if rep.Duplicated > 0 || rep.Unexpected > 0 {
			return run, fmt.Errorf("after run %d (%s): %v", run, sched.name, rep)
		}
		switch {
		case r.err == nil:
			if !rep.OK() {
				return run, fmt.Errorf("after %d runs: %v", run, rep)
			}
			return run, nil
		case r.hung:
			var logs []string
			for _, l := range r.logs[max(0, len(r.logs)-20):] {
				logs = append(logs, fmt.Sprintf("%s %s checkpoint=%s err=%s", l.level, l.msg, l.checkpoint, l.err))
			}
			return run, fmt.Errorf("run %d (%s) did not end in a minute: %v; its last warnings:\n  %s", run, sched.name, r.err, strings.Join(logs, "\n  "))
		case r.killed:
		case final:
			return run, fmt.Errorf("the run without faults failed: %v", r.err)
		case !strings.Contains(r.err.Error(), "injected") && !errors.Is(r.err, storage.ErrUnavailable):
			return run, fmt.Errorf("run %d (%s) failed with an error no injected fault explains: %v", run, sched.name, r.err)
		}
	}
}
