// Package s3test serves S3 from memory on a loopback port (gofakes3), with
// faults to inject: failing reads, writes and deletes, slow responses, and
// conditional writes ignored. gofakes3 (v1.2.0 and later) honours
// If-None-Match: * and If-Match on PUT atomically, as S3 does.
//
// StartProcess serves it from a process of its own: the test binary run
// again (ServeProcess).
package s3test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	// FailReads makes every GET and HEAD fail with 503 Slow Down while set.
	FailReads atomic.Bool
	// FailDeletes makes every DELETE fail with 503 Slow Down while set.
	FailDeletes atomic.Bool
	// IgnoreConditions makes the server ignore If-Match and If-None-Match
	// on writes while set, as some S3-compatible stores do.
	IgnoreConditions atomic.Bool
	// Delay is added to every response while set.
	Delay atomic.Int64 // nanoseconds
	// Failed counts the requests failed on purpose.
	Failed atomic.Int64
}

// Start serves S3 until the test ends, and sets the credentials in the
// test's environment.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	h, err := s.handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.setEnv(t, srv.URL)
	return s
}

// handler serves a fresh in-memory S3 with bucket "ckpt", through s's
// faults.
func (s *Server) handler() (http.Handler, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		return nil, err
	}
	fake := gofakes3.New(backend).Server()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := s.Delay.Load(); d > 0 {
			time.Sleep(time.Duration(d)) // an S3 that answers slowly
		}
		write := r.Method == http.MethodPut
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if write && s.FailWrites.Load() || read && s.FailReads.Load() || r.Method == http.MethodDelete && s.FailDeletes.Load() {
			s.Failed.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<Error><Code>SlowDown</Code><Message>injected: please reduce your request rate</Message></Error>`))
			return
		}
		if write && s.IgnoreConditions.Load() {
			r.Header.Del("If-Match")
			r.Header.Del("If-None-Match")
		}
		fake.ServeHTTP(w, r)
	}), nil
}

func (s *Server) setEnv(t testing.TB, endpoint string) {
	s.Env = []string{"AWS_ACCESS_KEY_ID=weir", "AWS_SECRET_ACCESS_KEY=weir", "AWS_EC2_METADATA_DISABLED=true"}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	s.URL = "s3://ckpt/weir?endpoint=" + endpoint + "&region=us-east-1&use_path_style=true&disable_https=true"
}

// serveEnv, set in the environment of a test binary run by StartProcess,
// makes ServeProcess serve.
const serveEnv = "WEIR_S3TEST_SERVE"

// urlPrefix starts the line on which a serving process tells its address.
const urlPrefix = "s3test serving on "

// StartProcess serves S3 from a process of its own until the test ends:
// the test binary run again, with only the test named run, which must call
// ServeProcess first thing. The returned Server's fault fields have no
// effect on that process.
func StartProcess(t testing.TB, run string) *Server {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the S3 server's process: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close() // the server ends when its stdin does
		if err := cmd.Wait(); err != nil {
			t.Errorf("the S3 server's process (pid %d): %v", cmd.Process.Pid, err)
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), urlPrefix); ok {
			go io.Copy(io.Discard, stdout)
			s := &Server{}
			s.setEnv(t, addr)
			return s
		}
	}
	cmd.Process.Kill()
	t.Fatalf("the S3 server's process (pid %d) did not say where it serves: %v", cmd.Process.Pid, lines.Err())
	return nil
}

// ServeProcess, called first in the test StartProcess names, serves S3
// when the binary was started by StartProcess, until its stdin closes, and
// then ends the process; otherwise it returns at once.
func ServeProcess() {
	if os.Getenv(serveEnv) == "" {
		return
	}
	s := &Server{}
	h, err := s.handler()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3test:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3test:", err)
		os.Exit(2)
	}
	go http.Serve(ln, h)
	fmt.Printf("%shttp://%s\n", urlPrefix, ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
