//go:build !race

package kafka

// raceEnabled: see race_on_test.go.
const raceEnabled = false
