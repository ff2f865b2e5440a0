//go:build race

package main

// raceEnabled: the race detector slows this package's own side several
// times (its in-process Kafka brokers and the checks that count a job's
// output; the weir processes it starts are built without it).
const raceEnabled = true
