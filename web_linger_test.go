package weir_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/browsertest"
	"github.com/weirstream/weir/internal/web"
)

// TestWebOutlivesAFailedJob: with WebLinger the web server answers after
// the job failed for good, with state failed, the cause, the failure in
// the failures table (a failure that ends the job was recorded only on a
// restart) and in weir_job_state; the page shows the end in a banner;
// WaitForWeb stops it when its ctx ends, and the open page then says
// loudly that it lost the job.
func TestWebOutlivesAFailedJob(t *testing.T) {
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "doomed", Restart: weir.NoRestart{}, Web: "127.0.0.1:0", WebLinger: time.Hour,
		OnWeb: func(a string) { addrs <- a }, Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints}})
	failing := weir.Map(weir.Source(env, "s", gen(t, 1000, func(i int64) int64 { return i })), "boom", func(i int64) int64 {
		if i == 500 {
			panic("record 500 is poison")
		}
		return i
	})
	weir.Sink(failing, "out", (&collect[int64]{}).sink())
	if _, err := env.Execute(context.Background()); err == nil {
		t.Fatal("the job did not fail")
	}
	t.Cleanup(func() { // the lingering server stops however the test ends (without Chromium it skips half-way)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		weir.WaitForWeb(ctx, nil)
	})
	base := "http://" + <-addrs
	var job web.Job
	getJSON(t, base+"/api/v1/job", &job)
	if job.State != "failed" || !strings.Contains(job.Cause, "record 500 is poison") || job.Ended == nil {
		t.Fatalf("after the job failed the API says %+v", job)
	}
	var failures []web.Failure
	getJSON(t, base+"/api/v1/failures", &failures)
	if len(failures) != 1 || !failures[0].Final || !strings.Contains(failures[0].Cause, "record 500 is poison") {
		t.Fatalf("failures: %+v, want the one that ended the job", failures)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics strings.Builder
	_, err = io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(metrics.String(), `weir_job_state{job="doomed",state="failed"} 1`) {
		t.Fatalf("metrics (%v) say no failed state:\n%s", err, metrics.String())
	}

	// The page says how the job ended; once the process is gone, that it
	// lost the job.
	bctx := browsertest.Start(t, time.Minute)
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#ended .banner[data-state="failed"]`)); err != nil {
		t.Fatalf("the page shows no failed end: %v", err)
	}
	banner, err := chromedp.Run(bctx, textOf(`#ended .banner`))
	if err != nil || !strings.Contains(banner, "record 500 is poison") {
		t.Fatalf("the page's end banner %q (%v)", banner, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C: no more lingering
	weir.WaitForWeb(ctx, nil)
	if _, err := http.Get(base + "/api/v1/job"); err == nil {
		t.Fatal("still serving after WaitForWeb")
	}
	if err := chromedp.Do(bctx, chromedp.WaitVisible(`#lost .banner`)); err != nil {
		t.Fatalf("the page does not say it lost the job: %v", err)
	}
	state, err := chromedp.Run(bctx, chromedp.Text(`#job-state`))
	if err != nil || state != "lost" {
		t.Fatalf("the page after its job's process went: badge %q (%v), want lost", state, err)
	}
}
