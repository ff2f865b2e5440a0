package main

import (
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// heapFloorBytes is the heap the garbage collector leaves room for above
// the live heap before it collects, at least (design note 88), in a
// process of procs cores (GOMAXPROCS): floorPerCore a core, up to
// maxHeapFloor. Go's default (GOGC=100: collect when the heap has doubled)
// makes a job with little live state collect every few megabytes: the word
// count, whose state is 2,000 counts but which cuts its lines and words
// out of 270 MB of 4 KiB blocks per 16 M words, collected dozens of times
// a run, and spent about a tenth of its time in the collector's marking
// and write barriers. A process's allocation rate grows with the cores it
// runs on, so its room does too: a process on one core (a worker given its
// share of a shared machine) gets half, and prefaults half; it collects
// more often per word, at no cost measured (design note 134). The room
// beyond two cores is not measured, and stays as it was.
func heapFloorBytes(procs int) int {
	return min(max(procs, 1)*floorPerCore, maxHeapFloor)
}

const (
	floorPerCore = 32 << 20
	maxHeapFloor = 64 << 20
)

// ballast is never read or written: it counts as live heap, so the
// collector's goal is at least twice its size. It holds no pointers, so
// marking it costs nothing, and, never touched, it takes no physical
// memory (fresh pages from the kernel are zero).
var ballast []byte

// setHeapFloor gives the heap its floor, unless the environment tunes the
// collector itself (GOGC or GOMEMLIMIT; getenv is os.Getenv): it reports
// the floor's size, 0 when none.
func setHeapFloor(getenv func(string) string) int {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	ballast = make([]byte, heapFloorBytes(runtime.GOMAXPROCS(0)))
	return len(ballast)
}

// warmHeapFloor backs the room the heap floor leaves with memory (see
// prefault) when cmd's process runs a job's tasks, which write all of it.
func warmHeapFloor(cmd *cobra.Command) {
	if len(ballast) > 0 && runsTasks(cmd) {
		prefault(len(ballast))
	}
}

// runsTasks reports whether command cmd runs a job's tasks in its process:
// weir run, worker, demo, verify and bench do, but bench cluster, whose
// runs are processes of their own; a coordinator and the tools do not.
func runsTasks(cmd *cobra.Command) bool {
	path := strings.Fields(cmd.CommandPath()) // weir bench cluster
	if len(path) < 2 {
		return false
	}
	switch path[1] {
	case "run", "worker", "demo", "verify":
		return true
	case "bench":
		return len(path) > 2 && path[2] != "cluster"
	}
	return false
}
