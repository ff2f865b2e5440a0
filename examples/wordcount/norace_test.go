//go:build !race

package wordcount

const raceEnabled = false
