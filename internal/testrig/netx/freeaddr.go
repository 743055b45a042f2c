// Package netx holds the loopback plumbing of llmroute's tests and tools:
// a free port to give a child process, and waiting until something
// listens or answers there.
package netx

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

// handedOut holds every port this process has given away. Caddy binds
// with SO_REUSEPORT, so two of its listeners (a test's admin endpoint and
// its site) can share a port handed out twice, and the kernel then gives
// the site's connections to the admin endpoint.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreeAddr returns 127.0.0.1:<port> of a port that was free a moment ago
// (the kernel picked it for a listener, closed again at once) and that
// this process has not handed out before. Another process may take it
// before the caller does; the callers start their child on it right away.
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 64 {
		port, err := kernelPort()
		if err != nil {
			return "", err
		}
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
		}
	}
	return "", errors.New("netx: the kernel kept offering ports already handed out")
}

// kernelPort is the port the kernel picks for a loopback listener, closed
// again at once; a variable so that a test can play the kernel.
var kernelPort = func() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}

// FreePort is FreeAddr's port as a number, for configurations that take
// one.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}
