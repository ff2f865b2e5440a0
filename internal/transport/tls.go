package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Mutual TLS. Every process of a cluster holds a certificate signed by the
// cluster's CA and accepts only peers that hold one too: a process without
// one cannot join, send a frame or read one.

// Role is what the holder of a cluster certificate may do. It is written
// into the certificate as a URI SAN, weir://role/<role>, so that a
// certificate of the cluster's CA grants no more than its role: a worker's
// works, an admin's reads status, and only the coordinator's commands
// workers.
type Role string

const (
	RoleCoordinator Role = "coordinator"
	RoleWorker      Role = "worker"
	RoleAdmin       Role = "admin"
)

// ErrNoRole is the error of a certificate that holds no role (one made
// before roles, or by another tool).
var ErrNoRole = errors.New("certificate holds no weir role")

// roleFor is the role of a certificate named name when WriteCerts is not
// told one: the coordinator's name is the coordinator's, admin is an
// admin's, every other name a worker's.
func roleFor(name string) Role {
	switch name {
	case string(RoleCoordinator):
		return RoleCoordinator
	case string(RoleAdmin):
		return RoleAdmin
	}
	return RoleWorker
}

func (r Role) valid() bool {
	return r == RoleCoordinator || r == RoleWorker || r == RoleAdmin
}

func (r Role) uri() *url.URL { return &url.URL{Scheme: "weir", Host: "role", Path: "/" + string(r)} }

// RoleOf is the role cert holds. A certificate with no role, or with more
// than one, is refused with an error that says how to make one that works.
func RoleOf(cert *x509.Certificate) (Role, error) {
	var roles []Role
	for _, u := range cert.URIs {
		if u.Scheme == "weir" && u.Host == "role" {
			roles = append(roles, Role(strings.TrimPrefix(u.Path, "/")))
		}
	}
	switch {
	case len(roles) == 0:
		return "", fmt.Errorf("%w: create the cluster's certificates again with weir cluster certs, or add a URI SAN weir://role/<coordinator|worker|admin>", ErrNoRole)
	case len(roles) > 1:
		return "", fmt.Errorf("%w: it holds %d roles; a certificate holds one", ErrNoRole, len(roles))
	case !roles[0].valid():
		return "", fmt.Errorf("%w: unknown role %.32q (want coordinator, worker or admin)", ErrNoRole, roles[0])
	}
	return roles[0], nil
}

// CertFiles are the paths of one process's credentials in a directory that
// WriteCerts made.
func CertFiles(dir, name string) (ca, cert, key string) {
	return filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
}

// WriteCerts creates, in dir, a CA (ca.pem, ca-key.pem) and for each name
// a certificate and key (<name>.pem, <name>-key.pem) valid for validFor,
// for the given hosts (DNS names or IP addresses) and the name itself. It
// refuses to overwrite an existing CA. Keys are written readable by the
// owner only.
//
// Each certificate holds a role (see Role): a name written name=role gets
// that role; otherwise "coordinator" is the coordinator's, "admin" an
// admin's and every other name a worker's.
func WriteCerts(dir string, names, hosts []string, validFor time.Duration) error {
	if len(names) == 0 {
		return errors.New("certs: no process names")
	}
	names = slices.Clone(names) // the caller's, unchanged
	roles := make([]Role, len(names))
	for i, n := range names {
		name, role, ok := strings.Cut(n, "=")
		if !ok {
			role = string(roleFor(name))
		}
		if name == "" {
			return fmt.Errorf("certs: process name %q is empty", n)
		}
		if !Role(role).valid() {
			return fmt.Errorf("certs: %q: unknown role %q (want coordinator, worker or admin)", n, role)
		}
		names[i], roles[i] = name, Role(role)
	}
	caPath, _, _ := CertFiles(dir, "")
	if _, err := os.Stat(caPath); err == nil {
		return fmt.Errorf("certs: %s exists; remove the directory's certificates or choose another --out", caPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "weir cluster CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certs: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca-key.pem"), caKey); err != nil {
		return err
	}
	for i, name := range names {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validFor),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:    []string{name},
			URIs:        []*url.URL{roles[i].uri()},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("certs: %s: %w", name, err)
		}
		_, certPath, keyPath := CertFiles(dir, name)
		if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
		if err := writePEM(keyPath, key); err != nil {
			return err
		}
	}
	// The CA certificate last: its presence says the directory is whole.
	return os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func writePEM(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// LoadTLS reads process name's credentials from dir and returns a
// configuration for both ends of a connection: TLS 1.3, the peer's
// certificate required and verified against the cluster's CA.
func LoadTLS(dir, name string) (*tls.Config, error) {
	caPath, certPath, keyPath := CertFiles(dir, name)
	pemCA, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: %w (create a test cluster's with `weir cluster certs --out DIR`)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("cluster TLS: %s holds no certificate", caPath)
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: process %q: %w", name, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// LoopbackUnlessNamed is addr with an empty host made 127.0.0.1: ":7700"
// listens on loopback, as --web ":8081" does, and every interface must be
// asked for by name ("0.0.0.0:7700", "[::]:7700"). Any other addr is
// returned as it is.
func LoopbackUnlessNamed(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
