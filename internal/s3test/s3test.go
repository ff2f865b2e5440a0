// Package s3test serves S3 from memory on a loopback port (gofakes3), with
// faults to inject: failing writes and slow responses.
package s3test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is an S3 server for one test.
type Server struct {
	// URL is a checkpoint location on it: bucket "ckpt", prefix "weir",
	// with the parameters the AWS SDK needs to reach it.
	URL string
	// Env holds the credentials a child process needs (KEY=value).
	Env []string
	// FailWrites makes every PUT fail with 503 Slow Down while set.
	FailWrites atomic.Bool
	// Delay is added to every response while set.
	Delay atomic.Int64 // nanoseconds
	// Failed counts the requests failed on purpose.
	Failed atomic.Int64
}

// Start serves S3 until the test ends, and sets the credentials in the
// test's environment.
func Start(t testing.TB) *Server {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := s.Delay.Load(); d > 0 {
			time.Sleep(time.Duration(d)) // an S3 that answers slowly
		}
		if r.Method == http.MethodPut && s.FailWrites.Load() {
			s.Failed.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<Error><Code>SlowDown</Code><Message>injected: please reduce your request rate</Message></Error>`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.Env = []string{"AWS_ACCESS_KEY_ID=weir", "AWS_SECRET_ACCESS_KEY=weir", "AWS_EC2_METADATA_DISABLED=true"}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	s.URL = "s3://ckpt/weir?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"
	return s
}
