package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weirstream/weir/internal/racetest"
)

// TestPrefaultedFloorIsWrittenWithoutFaults: after prefault, the heap's
// next half of the floor, written in 4 KiB blocks (the word count's lines
// and words), reuses pages already mapped, instead of faulting one in per
// block (11-19 µs each on a virtual machine). It fails if the runtime stops reusing the
// freed pages, or gives them back to the kernel first. (Where transparent
// huge pages are "always", the heap gets them without prefault, and the
// test could not tell: it is skipped.)
func TestPrefaultedFloorIsWrittenWithoutFaults(t *testing.T) {
	if hugePagesMode(t) == "always" {
		t.Skip(`transparent huge pages are "always": the heap has them without prefault`)
	}
	if !ownProcess(t) {
		return
	}
	defer func() { ballast = nil }()
	if setHeapFloor(func(string) string { return "" }) == 0 {
		t.Fatal("no heap floor")
	}
	prefault(len(ballast))
	blocks := len(ballast) / 2 / 4096
	before := minorFaults()
	kept := make([][]byte, 0, blocks)
	for range blocks {
		b := make([]byte, 4096)
		b[0], b[4095] = 1, 1
		kept = append(kept, b)
	}
	faults := minorFaults() - before
	t.Logf("%d blocks of 4 KiB written, %d page faults", len(kept), faults)
	if faults > int64(blocks/4) {
		t.Fatalf("%d page faults writing %d blocks of 4 KiB after prefault: the prefaulted pages were not reused", faults, blocks)
	}
}

// TestPrefaultStopsWithoutHugePages: in a process the kernel gives no huge
// pages (here by prctl(PR_SET_THP_DISABLE), which a parent can set for its
// children), prefault stops after the first 2 MiB instead of faulting in
// 64 MiB 4 KiB at a time, which would only move the job's faults earlier
// (16,874 faults and 250 ms when it did, found by review).
func TestPrefaultStopsWithoutHugePages(t *testing.T) {
	hugePagesMode(t)
	if !ownProcess(t) {
		return
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); err != nil {
		t.Skip("prctl(PR_SET_THP_DISABLE):", err)
	}
	before := minorFaults()
	prefault(maxHeapFloor)
	faults := minorFaults() - before
	t.Logf("prefault without huge pages: %d page faults", faults)
	if faults > 2000 {
		t.Fatalf("prefault took %d page faults in a process given no huge pages: it should stop after the first 2 MiB (512 pages)", faults)
	}
}

// hugePagesMode is the kernel's transparent huge page mode ("always" or
// "madvise"); it skips t where prefault does nothing ("never", or none).
func hugePagesMode(t *testing.T) string {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || bytes.Contains(thp, []byte("[never]")) {
		t.Skip("no transparent huge pages here: prefault does nothing")
	}
	if racetest.Enabled {
		t.Skip("the race detector's shadow memory takes page faults of its own")
	}
	if bytes.Contains(thp, []byte("[always]")) {
		return "always"
	}
	return "madvise"
}

// ownProcess runs t's test again in a process of its own, as weir's, and
// reports false; in that process, it reports true: memory that other
// tests of this one freed would be reused before prefault's.
func ownProcess(t *testing.T) bool {
	if os.Getenv("WEIR_TEST_PREFAULT") != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "WEIR_TEST_PREFAULT=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a process of its own:\n%s", out)
	if err == nil && bytes.Contains(out, []byte("--- SKIP")) {
		t.Skip("skipped in a process of its own")
	}
	if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
		t.Fatalf("the test in a process of its own: %v", err)
	}
	return false
}
