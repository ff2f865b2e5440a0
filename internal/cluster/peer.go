package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/transport"
)

// Who may call what. Every caller holds a certificate of the cluster's CA,
// which names it and holds its role (transport.Role): only a worker's may
// register and act as a worker, only the coordinator's may command a
// worker, and any role may read the job's status.

// peer is the holder of the client certificate a request came with.
type peer struct {
	name string
	role transport.Role
	// roleErr says why the certificate has no usable role.
	roleErr error
	// conn is the connection the request came on.
	conn *peerConn
}

type peerKey struct{}

// withPeer puts the client certificate's name and role, and the
// connection, into the request's context.
func withPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "a client certificate is required", http.StatusUnauthorized)
			return
		}
		p := peerOfCert(r.TLS.PeerCertificates[0])
		p.conn, _ = r.Context().Value(peerConnKey{}).(*peerConn)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, p)))
	})
}

func peerOfCert(c *x509.Certificate) peer {
	p := peer{name: c.Subject.CommonName}
	p.role, p.roleErr = transport.RoleOf(c)
	return p
}

// hasRole refuses a caller that does not hold role.
func (p peer) hasRole(role transport.Role, what string) error {
	if p.roleErr != nil {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate of %q may not %s: %w", clip(p.name), what, p.roleErr))
	}
	if p.role != role {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate of %q holds the %s role; only a %s's may %s", clip(p.name), p.role, role, what))
	}
	return nil
}

func peerOf(ctx context.Context) peer {
	p, ok := ctx.Value(peerKey{}).(peer)
	if !ok {
		panic("cluster: a handler without withPeer")
	}
	return p
}

// checkWorker refuses a caller that is not worker claimed: its certificate
// must hold the worker role and name claimed.
func checkWorker(ctx context.Context, claimed string) error {
	if len(claimed) > maxNameBytes {
		return connect.NewError(connect.CodeInvalidArgument, errNameTooLong(claimed))
	}
	p := peerOf(ctx)
	if err := p.hasRole(transport.RoleWorker, "act as a worker"); err != nil {
		return err
	}
	if p.name != claimed {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate names %q, not worker %q", clip(p.name), clip(claimed)))
	}
	return nil
}

// checkCoordinator refuses a caller that is not the coordinator.
func checkCoordinator(ctx context.Context) error {
	p := peerOf(ctx)
	if err := p.hasRole(transport.RoleCoordinator, "command a worker"); err != nil {
		return err
	}
	if p.name != CoordinatorName {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate names %q, not %q", clip(p.name), CoordinatorName))
	}
	return nil
}

// checkAnyRole refuses a caller whose certificate holds no role.
func checkAnyRole(ctx context.Context, what string) error {
	if p := peerOf(ctx); p.roleErr != nil {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate of %q may not %s: %w", clip(p.name), what, p.roleErr))
	}
	return nil
}

// peerConn is a connection a server accepted; gone is closed when it
// closes. The coordinator tells a worker process that died (its
// connection gone) from a live one by it.
type peerConn struct {
	gone     chan struct{}
	goneOnce sync.Once
}

func (c *peerConn) close() { c.goneOnce.Do(func() { close(c.gone) }) }

// closed reports whether the connection has closed; a nil one never does.
func (c *peerConn) closed() bool {
	if c == nil {
		return false
	}
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

type peerConnKey struct{}

// trackConns makes srv put a *peerConn into each request's context, which
// is closed when the request's connection closes.
func trackConns(srv *http.Server) {
	var conns sync.Map // net.Conn → *peerConn
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		pc := &peerConn{gone: make(chan struct{})}
		conns.Store(c, pc)
		return context.WithValue(ctx, peerConnKey{}, pc)
	}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			if pc, ok := conns.LoadAndDelete(c); ok {
				pc.(*peerConn).close()
			}
		}
	}
}

// toCoordinator returns tc for a client of the coordinator: the server
// must hold the coordinator's certificate, not merely one of the cluster's
// (every process's certificate is valid for the cluster's hosts).
func toCoordinator(tc *tls.Config) *tls.Config {
	tc = tc.Clone()
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the coordinator presented no certificate")
		}
		p := peerOfCert(cs.PeerCertificates[0])
		if p.roleErr != nil {
			return fmt.Errorf("the coordinator's certificate (of %q): %w", clip(p.name), p.roleErr)
		}
		if p.role != transport.RoleCoordinator {
			return fmt.Errorf("the server's certificate (of %q) holds the %s role, not the coordinator's: is the address the coordinator's?", clip(p.name), p.role)
		}
		return nil
	}
	return tc
}
