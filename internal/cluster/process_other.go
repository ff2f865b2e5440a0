//go:build !unix

package cluster

import "time"

// processCPU is 0: this system's process CPU time is not read.
func processCPU() time.Duration { return 0 }
