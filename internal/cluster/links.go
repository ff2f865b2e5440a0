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

// pendingTimeout bounds how long a peer's data connection waits for its
// attempt to take it: the deploys of an attempt all end within
// callTimeout, and a connection no attempt takes by then never will be.
const pendingTimeout = callTimeout

// arrivals holds the data connections peers made, until the attempt they
// belong to takes them. It holds at most one untaken connection per peer,
// each for at most pendingTimeout, and closes the rest (a certificate
// holder could otherwise plant connections for future attempts, one file
// descriptor each, for ever). Safe for concurrent use.
type arrivals struct {
	// timeout is pendingTimeout (shorter in tests).
	timeout time.Duration

	mu    sync.Mutex
	slots map[linkKey]*arrival
}

// arrival is the connection of one attempt and peer.
type arrival struct {
	ready     chan struct{} // closed once nc or err is set
	signalled bool
	nc        net.Conn // arrived, not yet taken
	taken     net.Conn // taken by the attempt (its links own it)
	err       error    // the slot is spoiled: see arrive
	timer     *time.Timer
}

func (s *arrival) signal() {
	if !s.signalled {
		s.signalled = true
		close(s.ready)
	}
}

// slot returns k's slot, made if need be; a.mu is held.
func (a *arrivals) slot(k linkKey) *arrival {
	if a.slots == nil {
		a.slots = map[linkKey]*arrival{}
	}
	s, ok := a.slots[k]
	if !ok {
		s = &arrival{ready: make(chan struct{})}
		a.slots[k] = s
	}
	return s
}

// arrive hands a peer's connection to its attempt. It closes the
// connection, and says why, when it is for an attempt older than current
// or than one the peer has connected for since; an untaken one of an
// older attempt of the peer is closed (the peer has moved on). A second
// connection for one attempt and peer closes both: one of them is not the
// peer's, and the attempt's link to the peer fails rather than read from
// a connection it cannot trust.
func (a *arrivals) arrive(k linkKey, nc net.Conn, current uint64) error {
	if k.attempt < current {
		nc.Close()
		return fmt.Errorf("a data connection of worker %q for attempt %d, older than this worker's %d", clip(k.peer), k.attempt, current)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for ok, s := range a.slots {
		if ok.peer != k.peer || ok.attempt == k.attempt || s.nc == nil {
			continue
		}
		if ok.attempt > k.attempt {
			nc.Close()
			return fmt.Errorf("a data connection of worker %q for attempt %d, after one for attempt %d", clip(k.peer), k.attempt, ok.attempt)
		}
		s.nc.Close()
		s.timer.Stop()
		delete(a.slots, ok)
	}
	s := a.slot(k)
	if s.err != nil || s.nc != nil || s.taken != nil {
		nc.Close()
		if s.nc != nil {
			s.nc.Close()
			s.timer.Stop()
			s.nc = nil
		}
		if s.taken != nil {
			s.taken.Close()
		}
		s.err = fmt.Errorf("worker %q made more than one data connection for attempt %d: closed them all, as one is not its own", clip(k.peer), k.attempt)
		s.signal()
		return s.err
	}
	timeout := a.timeout
	if timeout == 0 {
		timeout = pendingTimeout
	}
	s.nc = nc
	s.timer = time.AfterFunc(timeout, func() { a.expire(k, nc) })
	s.signal()
	return nil
}

// expire closes nc if it is still k's untaken connection.
func (a *arrivals) expire(k linkKey, nc net.Conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.slots[k]; ok && s.nc == nc {
		nc.Close()
		delete(a.slots, k)
	}
}

// ready returns a channel closed when k's connection has arrived (or its
// slot is spoiled).
func (a *arrivals) ready(k linkKey) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slot(k).ready
}

// take takes k's connection.
func (a *arrivals) take(k linkKey) (net.Conn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.slots[k]
	switch {
	case !ok || s.nc == nil && s.err == nil:
		return nil, fmt.Errorf("worker %q's data connection for attempt %d was closed: it waited longer than %v, or the worker connected for a later attempt", clip(k.peer), k.attempt, pendingTimeout)
	case s.err != nil:
		return nil, s.err
	}
	nc := s.nc
	s.nc, s.taken = nil, nc
	s.timer.Stop()
	return nc, nil
}

// forget closes the connections of attempts before current that no one
// took, and forgets those attempts.
func (a *arrivals) forget(current uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, s := range a.slots {
		if k.attempt >= current {
			continue
		}
		delete(a.slots, k)
		if s.nc != nil {
			s.nc.Close()
			s.timer.Stop()
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
	// idle is the coordinator's heartbeat timeout: a data connection whose
	// peer is silent for as long fails the attempt, as a lost worker would.
	idle time.Duration

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
	c := transport.New(nc, l.idle)
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
	k := linkKey{l.attempt, peer}
	select {
	case <-l.arr.ready(k):
		return l.arr.take(k)
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
