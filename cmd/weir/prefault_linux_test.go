package main

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/weirstream/weir/internal/racetest"
)

// TestPrefaultedFloorIsWrittenWithoutFaults: after prefault, the heap's
// next 32 MiB of 4 KiB blocks (the word count's lines and words) reuse
// pages already mapped, instead of faulting one in per block (about 12 µs
// each on a virtual machine). It fails if the runtime stops reusing the
// freed pages, or gives them back to the kernel first. It measures in a
// process of its own, as weir's: memory other tests of this one freed
// would be reused first.
func TestPrefaultedFloorIsWrittenWithoutFaults(t *testing.T) {
	if thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || bytes.Contains(thp, []byte("[never]")) {
		t.Skip("no transparent huge pages here: prefault does nothing")
	}
	if racetest.Enabled {
		t.Skip("the race detector's shadow memory takes page faults of its own")
	}
	if os.Getenv("WEIR_TEST_PREFAULT") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPrefaultedFloorIsWrittenWithoutFaults$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "WEIR_TEST_PREFAULT=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a process of its own:\n%s", out)
		if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("the test in a process of its own: %v", err)
		}
		return
	}
	defer func() { ballast = nil }()
	if setHeapFloor(func(string) string { return "" }) == 0 {
		t.Fatal("no heap floor")
	}
	prefault(len(ballast))
	const blocks = 32 << 20 / 4096
	before := minorFaults(t)
	kept := make([][]byte, 0, blocks)
	for range blocks {
		b := make([]byte, 4096)
		b[0], b[4095] = 1, 1
		kept = append(kept, b)
	}
	faults := minorFaults(t) - before
	t.Logf("%d blocks of 4 KiB written, %d page faults", len(kept), faults)
	if faults > blocks/4 {
		t.Fatalf("%d page faults writing %d blocks of 4 KiB after prefault: the prefaulted pages were not reused", faults, blocks)
	}
}

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}
