// Package pgtest starts a throwaway PostgreSQL server for tests, from the
// binaries of the Debian package (initdb, pg_ctl), in a temporary
// directory, on a free loopback port, with prepared transactions enabled.
package pgtest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	tmpl, err := template(bin, s.cred)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", tmpl, s.data()).CombinedOutput(); err != nil {
		t.Fatalf("copying the initialised cluster %s: %v\n%s", tmpl, err, out)
	}
	s.Port = freePort(t)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
	s.Restart()
	t.Cleanup(s.stop)
	return s
}

// template returns a cluster initdb made for these binaries and this
// user, kept in the temporary directory for later runs too: every test's
// server starts from a copy, and initdb (about a second of CPU each, 50
// servers in CI) runs once. Its name holds the binaries' path and version
// and initdb's arguments; it is used only if it is whole (PG_VERSION and
// global/pg_control), of the major version pg_ctl names and owned by the
// user the servers run as, else it is moved aside and made again. A test binary makes it in a directory of its
// own and renames it into place, so concurrent test binaries never see half
// of one; whoever renames first wins, and the others use theirs.
func template(bin string, cred *syscall.Credential) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	version, err := exec.Command(filepath.Join(bin, "pg_ctl"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pg_ctl --version: %w", err)
	}
	uid := os.Geteuid()
	if cred != nil {
		uid = int(cred.Uid)
	}
	h := fnv.New64a()
	fmt.Fprintln(h, bin, string(version), initdbArgs)
	dst := filepath.Join(os.TempDir(), fmt.Sprintf("weir-pgtest-%x-%d", h.Sum64(), uid))
	// "pg_ctl (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)": PG_VERSION holds
	// the major version, 15.
	major, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(string(version), "pg_ctl (PostgreSQL)")), ".")
	usable := func() bool { return whole(dst, uid, major) }
	if usable() {
		return dst, nil
	}
	dir, err := os.MkdirTemp("", "weir-pgtest-initdb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), append([]string{"-D", data}, initdbArgs...)...)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if _, err := os.Lstat(dst); err == nil && !usable() {
		// A half-made or foreign template: aside, then away (unless
		// another test binary just did so).
		err := os.Rename(dst, filepath.Join(dir, "bad"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !usable() {
			return "", fmt.Errorf("%s is not a whole PostgreSQL cluster of uid %d and cannot be moved aside (%w): remove it", dst, uid, err)
		}
	}
	if err := os.Rename(data, dst); err != nil {
		if usable() {
			return dst, nil // another test binary's
		}
		return "", fmt.Errorf("initdb's cluster into place: %w", err)
	}
	return dst, nil
}

var initdbArgs = []string{"-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"}

// whole reports whether dir is a directory uid owns holding a cluster's
// control file and version file, of version major.
func whole(dir string, uid int, major string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != uid {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "global", "pg_control")); err != nil {
		return false
	}
	v, err := os.ReadFile(filepath.Join(dir, "PG_VERSION"))
	return err == nil && strings.TrimSpace(string(v)) == major
}

var templateMu sync.Mutex

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
