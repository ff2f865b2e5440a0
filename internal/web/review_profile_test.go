package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/weirstream/weir/internal/profiling"
)

// TestPprofSecondsAreBounded: the flame graph takes 1 to 30 seconds, but
// net/http/pprof's own handlers take any ?seconds=: a holder of the token
// (or a typo) runs the CPU profiler (or the execution tracer) for an
// hour, which keeps every flame graph of the process at 409 all along
// and holds the handler's goroutine. They answer 400 for seconds out of
// the flame graph's bounds.
func TestPprofSecondsAreBounded(t *testing.T) {
	h := profiledServer(Control{Token: "secret"}).Handler()
	for _, path := range []string{
		"/debug/pprof/profile?seconds=3600",
		"/debug/pprof/trace?seconds=3600",
		"/debug/pprof/heap?seconds=3600",
	} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer secret")
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() { defer close(done); h.ServeHTTP(rec, req) }()
			select {
			case <-done:
			case <-ctx.Done():
				<-done // the cancelled context ends the profile
				t.Fatalf("GET %s ran past 3 s: the seconds are not bounded (want 400 at once)", path)
			}
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("GET %s: %d %q, want 400", path, rec.Code, rec.Body.String())
			}
		})
	}
}

// TestServeStopEndsAProfile: at the end of the job the web server stops
// (Serve's stop); a flame graph being profiled then must end with it,
// not profile on for up to 30 s in a goroutine nobody waits for (the
// process's CPU profiler held: the next job's flame graphs get 409), nor
// hold the stop for Shutdown's 5 s.
func TestServeStopEndsAProfile(t *testing.T) {
	s := profiledServer(Control{Token: "secret"})
	addr, stop, err := Serve("127.0.0.1:0", s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends the profile if the server did not
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/flamegraph?seconds=30", nil)
	req.Header.Set("Authorization", "Bearer secret")
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	// Wait until the flame graph holds the server's profiling token.
	deadline := time.Now().Add(10 * time.Second)
	for len(s.profiling) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flame graph did not start profiling within 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	start := time.Now()
	stop()
	// Bounds well short of the profile's 30 s, and long enough for a
	// loaded machine.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stop took %v while a profile ran: Shutdown waited for it", d.Round(time.Millisecond))
	}
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the flame graph's request still runs 10 s after the server stopped")
	}
	// The process's CPU profiler is free again.
	pctx, pcancel := context.WithCancel(context.Background())
	pcancel()
	if _, err := profiling.CPU(pctx, time.Second); errors.Is(err, profiling.ErrBusy) {
		t.Fatal("after the server stopped, the CPU profiler is still held by its flame graph")
	}
}

// TestCancelledFlameGraphEndsItsProfile: a client that goes away ends its
// flame graph's profile at once: the server's token and the process's
// CPU profiler are free again, no goroutine profiles on for 30 s.
func TestCancelledFlameGraphEndsItsProfile(t *testing.T) {
	s := profiledServer(Control{Token: "secret"})
	addr, stop, err := Serve("127.0.0.1:0", s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/flamegraph?seconds=30", nil)
	req.Header.Set("Authorization", "Bearer secret")
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.profiling) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flame graph did not start profiling within 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	cancel()
	<-answered
	deadline = time.Now().Add(2 * time.Second)
	for len(s.profiling) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flame graph still profiles 2 s after its client went away")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	pctx, pcancel := context.WithCancel(context.Background())
	pcancel()
	if _, err := profiling.CPU(pctx, time.Second); errors.Is(err, profiling.ErrBusy) {
		t.Fatal("the CPU profiler is still held after the flame graph's client went away")
	}
}

// TestPprofProfileAndFlameGraphsTakeTurns: /debug/pprof/profile is
// pprof's format, and while another CPU profile of the process runs (a
// flame graph's) it answers 409 as a flame graph does, not pprof's 500
// ("cpu profiling already in use").
func TestPprofProfileAndFlameGraphsTakeTurns(t *testing.T) {
	h := profiledServer(Control{Token: "secret"}).Handler()
	code, body := request(h, "/debug/pprof/profile?seconds=1", "secret")
	if code != http.StatusOK {
		t.Fatalf("GET /debug/pprof/profile?seconds=1: %d %s", code, body)
	}
	if p, err := profile.ParseData([]byte(body)); err != nil || p.DurationNanos <= 0 {
		t.Fatalf("GET /debug/pprof/profile answered no CPU profile: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() {
		for {
			_, err := profiling.CPU(ctx, profiling.MaxDuration)
			if !errors.Is(err, profiling.ErrBusy) || ctx.Err() != nil {
				held <- err
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-held
	}()
	// Wait until that profile runs: the runtime refuses another then.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := pprof.StartCPUProfile(io.Discard); err != nil {
			break
		}
		pprof.StopCPUProfile()
		if time.Now().After(deadline) {
			t.Fatal("the other profile did not start within 10 s")
		}
		runtime.Gosched() // polling a condition
	}
	if code, body := request(h, "/debug/pprof/profile?seconds=1", "secret"); code != http.StatusConflict || !strings.Contains(body, "already") {
		t.Fatalf("GET /debug/pprof/profile while another profile runs: %d %s, want 409", code, body)
	}
}
