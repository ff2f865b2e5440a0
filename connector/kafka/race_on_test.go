//go:build race

package kafka

// raceEnabled: the race detector slows the generators' sequences down
// several times, so they run fewer by default.
const raceEnabled = true
