// Package redisproc runs a real Valkey or Redis server on 127.0.0.1 for
// the tests of the homes directory and the shared store: no persistence,
// one free port, stoppable and started again on the same port (a store
// restart); with StartTLS, speaking TLS only, under a CA of its own.
package redisproc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
)

// Find returns the path of valkey-server or redis-server on PATH, or ""
// when neither is installed (apt-get install redis-server).
func Find() string {
	for _, b := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

// Server is one running (or stopped) server.
type Server struct {
	bin  string
	port int
	p    *proc.Proc
	// tlsDir holds ca.pem, server.pem and server.key when the server
	// speaks TLS.
	tlsDir string
}

// Start runs bin on a free loopback port and waits until it listens.
func Start(bin string) (*Server, error) {
	port, err := netx.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, port: port}
	return s, s.Start()
}

// StartTLS runs bin speaking TLS only, with a certificate for 127.0.0.1
// signed by a CA written to dir (CAFile), and waits until it listens.
func StartTLS(bin, dir string) (*Server, error) {
	if err := writeCerts(dir); err != nil {
		return nil, err
	}
	port, err := netx.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, port: port, tlsDir: dir}
	return s, s.Start()
}

// CAFile is the PEM file of the CA that signed a TLS server's
// certificate.
func (s *Server) CAFile() string { return filepath.Join(s.tlsDir, "ca.pem") }

// writeCerts writes a CA (ca.pem) and a certificate for 127.0.0.1 it
// signed (server.pem, server.key) to dir.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisproc test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's redis:// (rediss:// with TLS) address.
func (s *Server) URL() string {
	if s.tlsDir != "" {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Start starts the server (again) on its port and waits, at most 10 s,
// until it listens.
func (s *Server) Start() error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	if s.tlsDir != "" {
		args[1] = "0" // no plain port
		args = append(args, "--tls-port", strconv.Itoa(s.port), "--tls-auth-clients", "no",
			"--tls-cert-file", filepath.Join(s.tlsDir, "server.pem"), "--tls-key-file", filepath.Join(s.tlsDir, "server.key"),
			"--tls-ca-cert-file", s.CAFile())
	}
	p, err := proc.Start(exec.Command(s.bin, args...), "")
	if err != nil {
		return err
	}
	s.p = p
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("redisproc: %s exited: %s", s.bin, p.LogTail(5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("redisproc: the server did not listen within 10 s")
}

// Stop stops the server; Start starts it again on the same port.
func (s *Server) Stop() {
	if s.p != nil {
		s.p.Stop(2 * time.Second)
		s.p = nil
	}
}

// ForTest starts a server for t, stopped when t ends, or skips t when none
// is installed.
func ForTest(t testing.TB) *Server {
	t.Helper()
	bin := Find()
	if bin == "" {
		t.Skip("no valkey-server or redis-server on PATH (apt-get install redis-server)")
	}
	s, err := Start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// ForTestTLS is ForTest with a server that speaks TLS only (StartTLS).
func ForTestTLS(t testing.TB) *Server {
	t.Helper()
	bin := Find()
	if bin == "" {
		t.Skip("no valkey-server or redis-server on PATH (apt-get install redis-server)")
	}
	s, err := StartTLS(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
