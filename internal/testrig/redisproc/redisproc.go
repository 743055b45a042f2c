// Package redisproc runs a real Valkey or Redis server on 127.0.0.1 for
// the tests of the homes directory and the shared store: no persistence,
// one free port, stoppable and started again on the same port (a store
// restart).
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
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

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's redis:// address.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Start starts the server (again) on its port and waits, at most 10 s,
// until it listens.
func (s *Server) Start() error {
	p, err := proc.Start(exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"), "")
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
