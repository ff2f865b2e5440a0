//go:build race

package codec

// The race detector slows decoding down many times: under -race,
// TestBinaryRoundTrip draws fewer values by default.
func init() { defaultBinarySeeds = 300 }
