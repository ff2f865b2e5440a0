//go:build !race

package weir

const raceEnabled = false
