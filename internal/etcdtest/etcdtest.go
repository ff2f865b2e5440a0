// Package etcdtest starts real etcd servers for tests: Debian's etcd-server
// (the etcd binary), one process per member, on free loopback ports, in a
// temporary directory. A test can kill a member (SIGKILL) and start it
// again, to see what etcd's own failures do to its clients.
package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster. Its methods are for the test's
// goroutine.
type Cluster struct {
	Members []*Member
	t       testing.TB
	tls     *tls.Config // the clients' (StartTLS), or nil
}

// TLS is the files of a member's TLS setup (PEM): its certificate and key,
// and the CA whose certificates it requires of clients.
type TLS struct {
	Cert, Key, CA string
	// Client is a client's configuration, for WaitReady.
	Client *tls.Config
}

// Member is one etcd process of a cluster.
type Member struct {
	Name string
	// ClientURL is where clients reach it (http://127.0.0.1:port, or
	// https:// with StartTLS).
	ClientURL string
	peerURL   string
	dir       string
	args      []string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been waited for
}

// Bin is the etcd binary, or "" when none is installed.
func Bin() string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return ""
}

// Start starts a cluster of n members (1 or 3 in Weir's tests) and stops it
// when the test ends. Without etcd installed the test is skipped, saying
// how to install it; under CI=true it fails instead, since CI installs it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, nil, "127.0.0.1")
}

// StartTLS is Start with clients served over TLS only, a client
// certificate signed by s.CA required.
func StartTLS(t testing.TB, n int, s TLS) *Cluster {
	t.Helper()
	return start(t, n, &s, "127.0.0.1")
}

// StartOn is Start with clients served at host's address (a bridge's, for
// processes in network namespaces) rather than loopback.
func StartOn(t testing.TB, n int, host string) *Cluster {
	t.Helper()
	return start(t, n, nil, host)
}

func start(t testing.TB, n int, s *TLS, host string) *Cluster {
	t.Helper()
	bin := Bin()
	if bin == "" {
		msg := "etcd is not installed: apt-get install -y etcd-server (the tests run the etcd binary)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp("", "weir-etcd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t}
	scheme := "http://"
	if s != nil {
		c.tls, scheme = s.Client, "https://"
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			m.stop()
		}
		if t.Failed() {
			for _, m := range c.Members {
				os.RemoveAll(filepath.Join(m.dir, "data")) // NB: about 120 MB each; the log is what tells
				t.Logf("etcd member %s logged to %s", m.Name, filepath.Join(m.dir, "log"))
			}
			return
		}
		os.RemoveAll(dir)
	})
	// A port found free may be taken before etcd binds it (CI saw a
	// member exit with "address already in use"): the cluster then starts
	// again on other ports, up to three times.
	for try := 1; ; try++ {
		c.Members = nil
		c.startMembers(t, bin, dir, n, s, scheme, host)
		err := c.waitReady(30 * time.Second)
		if err == nil {
			return c
		}
		if !c.portTaken() || try == 3 {
			t.Fatal(err)
		}
		t.Logf("etcd try %d of 3: a port was taken before etcd bound it: %v", try, err)
		for _, m := range c.Members {
			m.stop()
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// startMembers starts n members, in dir, on ports free just now.
func (c *Cluster) startMembers(t testing.TB, bin, dir string, n int, s *TLS, scheme, host string) {
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: scheme + freeAddr(t, host), peerURL: "http://" + freeAddr(t, "127.0.0.1"),
			dir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	for _, m := range c.Members {
		m.args = []string{"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir), "--logger", "zap", "--log-level", "warn"}
		if s != nil {
			m.args = append(m.args, "--cert-file", s.Cert, "--key-file", s.Key, "--trusted-ca-file", s.CA, "--client-cert-auth")
		}
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		m.start(t, bin)
	}
}

// portTaken reports whether a member that exited logged that its address
// was in use.
func (c *Cluster) portTaken() bool {
	for _, m := range c.Members {
		select {
		case <-m.exited:
		default:
			continue
		}
		if log, _ := os.ReadFile(filepath.Join(m.dir, "log")); strings.Contains(string(log), "address already in use") {
			return true
		}
	}
	return false
}

// freeAddr returns an address of host with a port free just now (a
// variable, for a test that hands out a port in use).
var freeAddr = func(t testing.TB, host string) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (m *Member) start(t testing.TB, bin string) {
	log, err := os.OpenFile(filepath.Join(m.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	m.cmd = exec.Command(bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start etcd member %s: %v", m.Name, err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(m.cmd, m.exited)
}

// Kill kills the member's process (SIGKILL) and waits until it is gone.
func (c *Cluster) Kill(i int) { c.Members[i].stop() }

// Restart starts a killed member again on its data and ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.Members[i]
	m.stop()
	m.start(c.t, Bin())
}

func (m *Member) stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Hosts are the members' client addresses (host:port), as an etcd:// URL
// lists them.
func (c *Cluster) Hosts() []string {
	var hosts []string
	for _, m := range c.Members {
		u, err := url.Parse(m.ClientURL)
		if err != nil {
			panic(err)
		}
		hosts = append(hosts, u.Host)
	}
	return hosts
}

// WaitReady waits until the cluster takes a write (a quorum is up), or
// fails the test after limit or when a member the test did not kill has
// exited.
func (c *Cluster) WaitReady(limit time.Duration) {
	c.t.Helper()
	if err := c.waitReady(limit); err != nil {
		c.t.Fatal(err)
	}
}

// waitReady is WaitReady, returning what went wrong: a member exited, or
// no write was taken within limit.
func (c *Cluster) waitReady(limit time.Duration) error {
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop(), TLS: c.tls})
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Put(ctx, "etcdtest/ready", "")
		cancel()
		// A member that exited fails the wait even where a quorum of the
		// others took the write.
		for _, m := range c.Members {
			if m.cmd == nil {
				continue // killed by the test
			}
			select {
			case <-m.exited:
				return fmt.Errorf("etcd member %s exited: see %s", m.Name, filepath.Join(m.dir, "log"))
			default:
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd took no write within %v: %v", limit, err)
		}
	}
}
