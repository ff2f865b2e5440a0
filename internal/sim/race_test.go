//go:build race

package sim

// The simulation starts no goroutine, so the race detector finds nothing in
// it and only slows it down: under -race, TestSimulation runs fewer seeds
// by default.
func init() { defaultSeeds = 200 }
