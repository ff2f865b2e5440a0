//go:build race

package racetest

// Enabled says whether the race detector is on.
const Enabled = true
