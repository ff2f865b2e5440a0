package main

import (
	"testing"

	"github.com/weirstream/weir/internal/s3test"
)

// TestKill9OnS3WithPebble: the word count with its state in Pebble and
// incremental checkpoints on S3 (an in-memory S3 server in this test's
// process, which outlives the kills), killed with SIGKILL four times and
// restored each time: the output is exactly once. The lease is short, so
// that a restart does not wait long for the killed run's.
func TestKill9OnS3WithPebble(t *testing.T) {
	s3 := s3test.Start(t)
	j := newJob(t, 4, 250_000)
	kill9Until(t, j, s3.Env, "--checkpoint-interval", "50ms", "--checkpoint-dir", s3.URL+"&lease=300ms",
		"--state-backend", "pebble", "--state-dir", t.TempDir())
}
