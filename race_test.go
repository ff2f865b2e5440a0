//go:build race

package weir

// raceEnabled: the race detector slows the seeded generators about tenfold,
// so go test -race runs fewer seeds by default.
const raceEnabled = true
