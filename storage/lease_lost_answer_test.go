package storage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/weirstream/weir/checkpoint"
)

// lostAnswers serves S3 from memory; while armed, the next PUT of _lease
// that lost matches is applied and answered with a 500, as a reset
// connection or a gateway's 5xx loses an answer. It returns the bucket's
// Blob for job "job".
func lostAnswers(t *testing.T, armed *atomic.Bool, lost *atomic.Int64, match func(*http.Request) bool) *Blob {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_lease") && match(r) && armed.CompareAndSwap(true, false) {
			fake.ServeHTTP(httptest.NewRecorder(), r) // applied…
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
	b, err := OpenBlob(context.Background(), "s3://ckpt/weir?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true&disable_https=true", "job")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLeaseRenewalWhoseAnswerWasLostIsNotTakenOver: a renewal PUT of
// _lease (If-Match its ETag) is applied by S3 but answered with a 500. The
// SDK retries it with the same If-Match, which no longer matches: 412. The
// run was fenced for good (ErrLeaseLost, "another run holds the lease"),
// though _lease held this run's own token: one transient fault stopped
// the job, with an error naming a holder that does not exist.
func TestLeaseRenewalWhoseAnswerWasLostIsNotTakenOver(t *testing.T) {
	var armed atomic.Bool
	var lost atomic.Int64
	b := lostAnswers(t, &armed, &lost, func(r *http.Request) bool { return r.Header.Get("If-Match") != "" })
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

// TestLockWhoseAnswerWasLostHoldsTheLease: the PUT that takes the lease
// (If-None-Match: *) is applied and its answer lost; the SDK's retry fails
// its condition. Lock read _lease, found a current lease, and waited for it
// to run out, saying it waited for another run's lease: its own (found by
// TestS3Faults, a run that did not end in a minute).
func TestLockWhoseAnswerWasLostHoldsTheLease(t *testing.T) {
	var armed atomic.Bool
	var lost atomic.Int64
	b := lostAnswers(t, &armed, &lost, func(r *http.Request) bool { return r.Header.Get("If-None-Match") != "" })
	var logs bytes.Buffer
	b.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	armed.Store(true)
	lock, err := b.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if lost.Load() == 0 {
		t.Fatal("the lease was taken without a lost answer")
	}
	if strings.Contains(logs.String(), "waiting") {
		t.Fatalf("Lock waited for the lease its own write took:\n%s", logs.String())
	}
	if _, err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(1); id <= 3; id++ {
		if err := takeCheckpoint(b, id); err != nil {
			t.Fatalf("checkpoint %d after a Lock whose answer was lost: %v", id, err)
		}
	}
}
