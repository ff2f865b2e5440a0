//go:build race

package storage_test

// The race detector slows the word count down several times: under -race,
// TestStorageFaults runs fewer seeds by default.
func init() { defaultFaultSeeds = 20 }
