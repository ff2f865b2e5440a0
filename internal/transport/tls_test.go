package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

func certs(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteCerts(dir, names, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadTLS(t testing.TB, dir, name string) *tls.Config {
	t.Helper()
	c, err := LoadTLS(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsPair connects client to a listener serving with server; it returns
// the two ends and the server's handshake error.
func tlsPair(t testing.TB, server, client *tls.Config) (net.Conn, net.Conn, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
		}
		ch <- accepted{c, err}
	}()
	cc, err := tls.Dial("tcp", ln.Addr().String(), client)
	a := <-ch
	if err != nil {
		if a.c != nil {
			a.c.Close()
		}
		return nil, nil, a.err
	}
	if a.err != nil {
		cc.Close()
		a.c.Close()
	}
	return cc, a.c, a.err
}

func TestMutualTLSCarriesChannels(t *testing.T) {
	dir := certs(t, "coordinator", "worker-1")
	cc, sc, err := tlsPair(t, loadTLS(t, dir, "worker-1"), loadTLS(t, dir, "coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName; got != "coordinator" {
		t.Fatalf("the server sees %q", got)
	}
	a, b := New(cc, time.Minute), New(sc, time.Minute)
	defer a.Close()
	defer b.Close()
	ready := make(chan struct{}, 1)
	in, _ := b.Input(1, strings_, 2, ready)
	out, _ := a.Output(1, strings_)
	if err := out.Push(context.Background(), runtime.Event{Kind: runtime.KindBarrier, ID: 4}); err != nil {
		t.Fatal(err)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBarrier || e.ID != 4 {
		t.Fatalf("got %v", e)
	}
}

// A process whose certificate another CA signed, or that has none, is
// refused before it can send a frame.
func TestProcessWithoutClusterCertificateIsRefused(t *testing.T) {
	dir := certs(t, "worker-1")
	other := certs(t, "intruder")
	server := loadTLS(t, dir, "worker-1")

	intruder := loadTLS(t, other, "intruder")
	intruder.RootCAs = server.RootCAs // it trusts the cluster, the cluster does not trust it
	if _, _, err := tlsPair(t, server, intruder); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate of another CA: %v", err)
	}

	anonymous := &tls.Config{RootCAs: server.RootCAs, MinVersion: tls.VersionTLS13}
	if _, _, err := tlsPair(t, server, anonymous); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("no certificate: %v", err)
	}
}

func TestCertsAreNotOverwritten(t *testing.T) {
	dir := certs(t, "a")
	if err := WriteCerts(dir, []string{"b"}, nil, time.Hour); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second WriteCerts into one directory: %v", err)
	}
	if _, err := LoadTLS(t.TempDir(), "a"); err == nil || !strings.Contains(err.Error(), "weir cluster certs") {
		t.Fatalf("LoadTLS of an empty directory: %v", err)
	}
}

// BenchmarkChannel measures one channel's throughput over loopback TCP,
// with batches of 1024 records of 16 bytes.
func BenchmarkChannel(b *testing.B) {
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			var cc, sc net.Conn
			if mode == "tls" {
				dir := certs(b, "a", "b")
				var err error
				if cc, sc, err = tlsPair(b, loadTLS(b, dir, "b"), loadTLS(b, dir, "a")); err != nil {
					b.Fatal(err)
				}
			} else {
				cc, sc = tcpPair(b)
			}
			a, r := New(cc, time.Minute), New(sc, time.Minute)
			defer a.Close()
			defer r.Close()
			ready := make(chan struct{}, 1)
			in, _ := r.Input(1, strings_, 16, ready)
			out, _ := a.Output(1, strings_)
			batch := make([]string, 1024)
			for i := range batch {
				batch[i] = fmt.Sprintf("record-%09d", i)
			}
			frameBytes := len(appendEvent(nil, typeEvent, 1, runtime.Event{Kind: runtime.KindBatch, Batch: batch}, strings_))
			go func() {
				for range b.N {
					if out.Push(context.Background(), runtime.Event{Kind: runtime.KindBatch, Batch: batch}) != nil {
						return
					}
				}
			}()
			b.ResetTimer()
			for n := 0; n < b.N; {
				if _, ok := in.TryPop(); ok {
					n++
					continue
				}
				select {
				case <-ready:
				case <-r.Done():
					b.Fatal(r.Err())
				}
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*len(batch))/s, "records/s")
			b.ReportMetric(float64(b.N*frameBytes)/s/1e6, "MB/s")
		})
	}
}

// Every certificate holds one role: the coordinator's name the
// coordinator's, admin an admin's, any other name a worker's, unless told.
func TestCertificateRoles(t *testing.T) {
	dir := certs(t, "coordinator", "worker-1", "admin", "ops=admin", "lead=coordinator")
	for name, want := range map[string]Role{"coordinator": RoleCoordinator, "worker-1": RoleWorker, "admin": RoleAdmin, "ops": RoleAdmin, "lead": RoleCoordinator} {
		c := loadTLS(t, dir, name)
		cert, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if got, err := RoleOf(cert); got != want || err != nil {
			t.Errorf("%s: role %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := RoleOf(&x509.Certificate{}); !errors.Is(err, ErrNoRole) || !strings.Contains(err.Error(), "weir cluster certs") {
		t.Errorf("a certificate without a role: %v", err)
	}
	if err := WriteCerts(t.TempDir(), []string{"x=root"}, nil, time.Hour); err == nil || !strings.Contains(err.Error(), `unknown role "root"`) {
		t.Errorf("an unknown role: %v", err)
	}
}
