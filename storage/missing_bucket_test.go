package storage_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/storage"
)

// TestMissingBucketIsNoPassingFault: a checkpoint URL naming a bucket that
// does not exist fails the start's lease, and a worker's probe, with
// ErrNoBucket, which names the fix. Before, both said ErrUnavailable
// ("retrying may succeed"), which no retry could make true, and a worker's
// probe was retried until the restart strategy gave up.
func TestMissingBucketIsNoPassingFault(t *testing.T) {
	s3 := s3test.Start(t)
	missing := strings.Replace(s3.URL, "s3://ckpt/", "s3://no-such-bucket/", 1)
	if missing == s3.URL {
		t.Fatalf("s3test's URL %s does not name bucket ckpt", s3.URL)
	}
	b, err := storage.OpenBlob(context.Background(), missing, "job")
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Lock()
	if err == nil {
		l.Close()
		t.Fatal("a lease taken in a bucket that does not exist")
	}
	if !errors.Is(err, storage.ErrNoBucket) || errors.Is(err, storage.ErrUnavailable) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("the lease in a missing bucket: %v; want ErrNoBucket, not ErrUnavailable", err)
	}
	if err := b.WriteProbe("token", []byte("worker-1")); !errors.Is(err, storage.ErrNoBucket) {
		t.Fatalf("a probe written to a missing bucket: %v; want ErrNoBucket", err)
	}

	// An endpoint that is no S3 answers every request 404 without an S3
	// error code, which gocloud takes for NotFound: that is no missing
	// bucket (the outside review found it said so).
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	notS3, err := storage.OpenBlob(context.Background(), "s3://ckpt/weir?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true&disable_https=true", "job")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := notS3.Lock(); err == nil || errors.Is(err, storage.ErrNoBucket) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("the lease on an endpoint that is no S3: %v; want an error, not ErrNoBucket", err)
	}

	// The bucket there: neither is refused.
	ok, err := storage.OpenBlob(context.Background(), s3.URL, "job")
	if err != nil {
		t.Fatal(err)
	}
	if l, err = ok.Lock(); err != nil {
		t.Fatalf("the lease in the bucket there: %v", err)
	}
	l.Close()
	if err := ok.WriteProbe("token", []byte("worker-1")); err != nil {
		t.Fatalf("a probe written to the bucket there: %v", err)
	}
}
