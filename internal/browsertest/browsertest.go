// Package browsertest starts headless Chromium for tests that load Weir's
// web UI (chromedp), and says where they save screenshots.
package browsertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Start starts headless Chromium for the test and returns its context,
// which ends with the test (or after timeout). Without Chromium the test
// skips, except under CI=true, where .ci/run installs it and its absence
// fails.
func Start(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium on PATH under CI=true (.ci/run installs Debian's chromium)")
		}
		t.Skip("no Chromium on PATH: install Debian's chromium to run the browser tests")
	}
	return start(t, path, timeout)
}

// start starts the Chromium at path.
func start(t *testing.T, path string, timeout time.Duration) context.Context {
	t.Helper()
	// Chromium now and then exits before it listens, saying nothing of
	// why (seen once in CI under load: 0.9 s, no crash report). That is
	// the browser's start, not the page under test, so a test tries three
	// times, each with a new profile, before it fails.
	var err error
	for try := 1; try <= 3; try++ {
		var ctx context.Context
		if ctx, err = launch(t, path, timeout); err == nil {
			return ctx
		}
		t.Logf("Chromium did not start (try %d of 3): %v", try, err)
		if errors.Is(err, context.DeadlineExceeded) {
			break // the test's time is gone
		}
	}
	t.Fatalf("start Chromium: %v", err)
	return nil
}

// launch starts one Chromium with a new profile; the test's cleanup
// stops it whether or not it started.
func launch(t *testing.T, path string, timeout time.Duration) (context.Context, error) {
	// The flags keep Chromium off the network: it reaches only the page.
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})
	// Start the browser now, once: chromedp allocates it in the first Run,
	// and after a failed allocation a later Run (a test's diagnostics on
	// its failure path) allocates again on the same context, whose two
	// exits then close one channel twice and panic the whole test binary.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`true`))
	return ctx, err
}

// Artifacts is where a test saves what a person should look at:
// $WEIR_TEST_ARTIFACTS, else a directory of the test's own.
func Artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WEIR_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
