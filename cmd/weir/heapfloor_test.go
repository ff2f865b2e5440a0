package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestHeapFloorOnlyWhenTheEnvironmentDoesNotTuneTheCollector(t *testing.T) {
	defer func() { ballast = nil }()
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{nil, heapFloorBytes(runtime.GOMAXPROCS(0))},
		{map[string]string{"GOGC": "400"}, 0},
		{map[string]string{"GOGC": "off"}, 0},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, 0},
	} {
		ballast = nil
		if got := setHeapFloor(func(k string) string { return c.env[k] }); got != c.want || len(ballast) != c.want {
			t.Errorf("environment %v: floor %d (ballast %d bytes); want %d", c.env, got, len(ballast), c.want)
		}
	}
}

// TestRunsTasks: the heap floor is backed with memory ahead (prefault) in
// the processes that run tasks, and in no other: a coordinator or a tool
// would only pay for it.
func TestRunsTasks(t *testing.T) {
	root := newRoot()
	// bench cluster runs each mode as processes of their own, which do it.
	for path, want := range map[string]bool{
		"run wordcount": true, "run nexmark": true, "worker": true, "demo": true, "demo kafka": true, "verify": true,
		"bench wordcount": true, "bench nexmark": true, "bench state": true, "bench cluster": false, "bench": false,
		"coordinator": false, "list": false, "status": false, "savepoint": false, "cancel": false,
		"checkpoints": false, "kafka": false, "nexmark": false, "cluster": false, "": false,
	} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		if got := runsTasks(cmd); got != want {
			t.Errorf("weir %s (found %q): runsTasks %v, want %v", path, cmd.CommandPath(), got, want)
		}
	}
}

// TestHeapFloorGrowsWithTheCores: a process sized to one core (a worker
// given its share of a machine) gets half the room of one on two, and no
// process more than the 64 MiB measured.
func TestHeapFloorGrowsWithTheCores(t *testing.T) {
	for procs, want := range map[int]int{0: 32 << 20, 1: 32 << 20, 2: 64 << 20, 3: 64 << 20, 64: 64 << 20} {
		if got := heapFloorBytes(procs); got != want {
			t.Errorf("GOMAXPROCS %d: floor %d MiB, want %d MiB", procs, got>>20, want>>20)
		}
	}
}
