// Package pgtest starts a throwaway PostgreSQL server for tests, from the
// binaries of the Debian package (initdb, pg_ctl), in a temporary
// directory, on a free loopback port, with prepared transactions enabled.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// Server is a running PostgreSQL server.
type Server struct {
	// URL connects to its database postgres as the superuser postgres.
	URL      string
	Port     int
	dir      string
	bin      string
	settings []string
	cred     *syscall.Credential
	t        testing.TB
}

// Bin is the directory of the PostgreSQL binaries, or "" when none is
// installed.
func Bin() string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(found) == 0 {
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p)
		}
		return ""
	}
	slices.Sort(found)
	return filepath.Dir(found[len(found)-1])
}

// Start starts a server for the test and stops it when the test ends;
// settings (name=value) override the defaults. With no PostgreSQL installed
// the test is skipped, saying how to install it; under CI=true it fails
// instead, since CI installs it.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	bin := Bin()
	if bin == "" {
		msg := "PostgreSQL is not installed: apt-get install -y postgresql (the tests run initdb and pg_ctl from /usr/lib/postgresql/*/bin)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{bin: bin, t: t, settings: settings}
	dir, err := os.MkdirTemp("", "weir-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: run it as the package's user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	s.Port = freePort(t)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
	s.Restart()
	t.Cleanup(s.stop)
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, log)
	}
}

// Restart starts the server, stopping it first if it runs; it waits until
// it accepts connections.
func (s *Server) Restart() {
	s.t.Helper()
	s.stop()
	// NB: fsync=off and its kin make a throwaway server's prepared
	// transactions and commits cheaper; no test crashes the server itself
	// (Stop is a fast shutdown, which writes everything out), and the
	// kernel keeps what the server wrote.
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_prepared_transactions=64 -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
		s.Port, s.dir)
	for _, set := range s.settings {
		opts += " -c " + set
	}
	s.run("pg_ctl", "start", "-w", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-o", opts)
}

// Stop stops the server (fast shutdown: open transactions are rolled back,
// prepared ones kept).
func (s *Server) Stop() {
	s.t.Helper()
	s.run("pg_ctl", "stop", "-w", "-m", "fast", "-D", s.data())
}

func (s *Server) stop() {
	if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err == nil {
		s.Stop()
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
