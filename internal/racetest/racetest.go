// Package racetest lets a test that the race detector slows many times,
// and that finds nothing under it that others do not, run without it:
// .ci/run runs the tests with -race, then these without.
package racetest

import "testing"

// Skip skips t under the race detector. Every test that calls it must be
// named in .ci/run's run without -race, or CI never runs it.
func Skip(t testing.TB) {
	t.Helper()
	if Enabled {
		t.Skip("slow under -race and finds nothing there that other tests do not: .ci/run runs it without -race")
	}
}
