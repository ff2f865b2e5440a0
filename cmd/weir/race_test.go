//go:build race

package main

// raceEnabled: under the race detector, processes of weir built for the
// tests run several times slower; the longest process tests run one
// variant of their modes only (go test ./..., without -race, runs all).
const raceEnabled = true
