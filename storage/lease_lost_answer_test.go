package storage

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// TestLeaseRenewalWhoseAnswerWasLostIsNotTakenOver: a renewal PUT of
// _lease (If-Match its ETag) is applied by S3 but answered with a 500 (the
// answer was lost, as a reset connection or a gateway's 5xx does). The
// SDK retries it with the same If-Match, which no longer matches: 412. The
// run was fenced for good (ErrLeaseLost, "another run holds the lease"),
// though _lease held this run's own token: one transient fault stopped
// the job, with an error naming a holder that does not exist.
func TestLeaseRenewalWhoseAnswerWasLostIsNotTakenOver(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	var armed atomic.Bool
	var lost atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if armed.Load() && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_lease") && r.Header.Get("If-Match") != "" && armed.CompareAndSwap(true, false) {
			rec := httptest.NewRecorder()
			fake.ServeHTTP(rec, r) // applied…
			lost.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError) // …but the answer is a 500
			w.Write([]byte(`<Error><Code>InternalError</Code><Message>injected after the write</Message></Error>`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "weir")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "weir")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	url := "s3://ckpt/weir?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"
	b, err := OpenBlob(context.Background(), url, "job")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := takeCheckpoint(b, 1); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err = takeCheckpoint(b, 2) // Commit renews the lease first
	if lost.Load() == 0 {
		t.Fatal("no renewal was made")
	}
	if err == nil {
		err = takeCheckpoint(b, 3)
	}
	if err != nil {
		data, _, gerr := b.cas.get(context.Background(), leaseKey)
		own := gerr == nil && strings.Contains(string(data), b.held.Load().rec.Token)
		t.Fatalf("after one renewal whose 500 answer followed its write (_lease holds this run's token: %v): %v (lease lost: %v), want checkpoints 2 and 3 committed", own, err, errors.Is(err, ErrLeaseLost))
	}
}
