package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/transport"
)

// The data plane: one connection per pair of workers and attempt, made by
// the worker whose name sorts first. After the TLS handshake (ALPN
// dataProto) the dialer sends the attempt as 8 bytes, big-endian; the
// peer's name is its certificate's. A connection of an earlier attempt is
// never reused, so no event of a stopped attempt reaches a later one.
const dataProto = "weir-data/1"

// handshakeTimeout bounds a data connection's handshake and a deploy's
// wait for a peer's connection.
const handshakeTimeout = 10 * time.Second

type linkKey struct {
	attempt uint64
	peer    string
}

// arrivals holds the data connections peers made, until the attempt they
// belong to takes them.
type arrivals struct {
	mu      sync.Mutex
	waiting map[linkKey]chan net.Conn
}

func (a *arrivals) slot(k linkKey) chan net.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting == nil {
		a.waiting = map[linkKey]chan net.Conn{}
	}
	c, ok := a.waiting[k]
	if !ok {
		c = make(chan net.Conn, 1)
		a.waiting[k] = c
	}
	return c
}

// arrive hands a peer's connection to its attempt. A second one for the
// same attempt, or one for an attempt older than current, is closed.
func (a *arrivals) arrive(k linkKey, nc net.Conn, current uint64) {
	if k.attempt < current {
		nc.Close()
		return
	}
	select {
	case a.slot(k) <- nc:
	default:
		nc.Close()
	}
}

// forget closes the connections of attempts before current that no one took.
func (a *arrivals) forget(current uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, c := range a.waiting {
		if k.attempt >= current {
			continue
		}
		delete(a.waiting, k)
		select {
		case nc := <-c:
			nc.Close()
		default:
		}
	}
}

// links are one attempt's data connections of a worker, made on first use.
type links struct {
	self    string
	attempt uint64
	addrs   map[string]string // peer → data address
	tls     *tls.Config
	arr     *arrivals
	// ctx ends with the attempt; setup, when the deploy that makes the
	// connections gives up.
	ctx, setup context.Context

	mu    sync.Mutex
	conns map[string]*transport.Conn
	// failed hears of the first connection that fails.
	failed func(peer string, err error)
}

// conn returns the connection to peer, dialling it or waiting for the
// peer's dial.
func (l *links) conn(peer string) (*transport.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.conns[peer]; ok {
		return c, nil
	}
	var nc net.Conn
	var err error
	if l.self < peer {
		nc, err = l.dial(peer)
	} else {
		nc, err = l.await(peer)
	}
	if err != nil {
		return nil, err
	}
	c := transport.New(nc)
	l.conns[peer] = c
	go func() {
		select {
		case <-c.Done():
			l.failed(peer, c.Err())
		case <-l.ctx.Done():
		}
	}()
	return c, nil
}

func (l *links) dial(peer string) (net.Conn, error) {
	addr, ok := l.addrs[peer]
	if !ok {
		return nil, fmt.Errorf("no data address for worker %q", peer)
	}
	cfg := l.tls.Clone()
	cfg.NextProtos = []string{dataProto}
	cfg.ServerName = "" // the certificate is checked against the peer's name below
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = verifyPeer(l.tls, peer)
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: handshakeTimeout}, Config: cfg}
	ctx, cancel := context.WithTimeout(l.setup, handshakeTimeout)
	defer cancel()
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("data connection to worker %q at %s: %w", peer, addr, err)
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], l.attempt)
	nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := nc.Write(hdr[:]); err != nil {
		nc.Close()
		return nil, fmt.Errorf("data connection to worker %q at %s: %w", peer, addr, err)
	}
	nc.SetWriteDeadline(time.Time{})
	return nc, nil
}

func (l *links) await(peer string) (net.Conn, error) {
	t := time.NewTimer(handshakeTimeout)
	defer t.Stop()
	select {
	case nc := <-l.arr.slot(linkKey{l.attempt, peer}):
		return nc, nil
	case <-t.C:
		return nil, fmt.Errorf("worker %q did not connect within %v", peer, handshakeTimeout)
	case <-l.setup.Done():
		return nil, context.Cause(l.setup)
	}
}

func (l *links) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, c := range l.conns {
		c.Close()
		delete(l.conns, p)
	}
}

// peerError is the failure of the data connection to peer.
type peerError struct {
	peer string
	err  error
}

func (e peerError) Error() string {
	return fmt.Sprintf("the data connection to worker %s failed: %v", e.peer, e.err)
}

func (e peerError) Unwrap() error { return e.err }

// verifyPeer checks a peer's certificate against the cluster's CA, and
// that it names want.
func verifyPeer(base *tls.Config, want string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("worker %q presented no certificate", want)
		}
		if _, err := verifyChain(base, cs); err != nil {
			return err
		}
		p := peerOfCert(cs.PeerCertificates[0])
		if p.name != want {
			return fmt.Errorf("the certificate at worker %q's address names %q", want, clip(p.name))
		}
		if p.roleErr != nil {
			return fmt.Errorf("the certificate at worker %q's address: %w", want, p.roleErr)
		}
		if p.role != transport.RoleWorker {
			return fmt.Errorf("the certificate at worker %q's address holds the %s role, not a worker's", want, p.role)
		}
		return nil
	}
}

// readAttempt reads a data connection's attempt header.
func readAttempt(nc net.Conn) (uint64, error) {
	var hdr [8]byte
	nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return 0, err
	}
	nc.SetReadDeadline(time.Time{})
	return binary.BigEndian.Uint64(hdr[:]), nil
}

func verifyChain(base *tls.Config, cs tls.ConnectionState) ([][]*x509.Certificate, error) {
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	return cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: base.RootCAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
}
