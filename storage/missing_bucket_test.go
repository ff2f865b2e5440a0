package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/storage"
)

// TestMissingBucketFailsAtOpen: a checkpoint URL naming a bucket that does
// not exist fails at open, naming the bucket and the fix. Before, the
// first write failed with ErrUnavailable ("retrying may succeed"), which
// no retry could make true. A bucket S3 cannot be asked about for now
// (503 on every read) is not taken for missing: the open succeeds, and
// the first use says what fails.
func TestMissingBucketFailsAtOpen(t *testing.T) {
	s3 := s3test.Start(t)
	missing := strings.Replace(s3.URL, "s3://ckpt/", "s3://no-such-bucket/", 1)
	if missing == s3.URL {
		t.Fatalf("s3test's URL %s does not name bucket ckpt", s3.URL)
	}
	_, err := storage.OpenBlob(context.Background(), missing, "job")
	if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist: create it`) {
		t.Fatalf("open of a missing bucket: %v; want it refused, naming the bucket", err)
	}
	if errors := s3.Failed.Load(); errors != 0 {
		t.Fatalf("%d requests failed on purpose before any fault was set", errors)
	}

	if _, err := storage.OpenBlob(context.Background(), s3.URL, "job"); err != nil {
		t.Fatalf("open of the existing bucket: %v", err)
	}

	s3.FailReads.Store(true)
	if _, err := storage.OpenBlob(context.Background(), s3.URL, "job"); err != nil {
		t.Fatalf("open while S3 answers 503: %v; want it left to the first use", err)
	}
	if s3.Failed.Load() == 0 {
		t.Fatal("the open while S3 answered 503 asked S3 nothing: the check of the bucket is not made")
	}
}
