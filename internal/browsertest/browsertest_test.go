package browsertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestStartTriesAgain starts a "Chromium" that exits at once the first
// time, as it once did in CI, and the real one the second: the test gets
// a browser that answers.
func TestStartTriesAgain(t *testing.T) {
	real, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no Chromium on PATH")
	}
	dir := t.TempDir()
	tries := filepath.Join(dir, "tries")
	script := filepath.Join(dir, "flaky-chromium")
	body := "#!/bin/sh\necho x >> " + tries + "\n" +
		"[ $(wc -l < " + tries + ") -ge 2 ] || { echo 'exiting before it listens' >&2; exit 1; }\n" +
		"exec " + real + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := start(t, script, time.Minute)
	two, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1 + 1`))
	if err != nil || two != 2 {
		t.Fatalf("the browser after a failed start answers %d, %v", two, err)
	}
	got, err := os.ReadFile(tries)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got) / 2; n != 2 {
		t.Fatalf("started %d times, want 2 (one failure, one start)", n)
	}
}
